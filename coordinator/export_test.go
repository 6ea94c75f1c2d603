package coordinator

// EdgeSecret is this start's server identity secret (serverid.go), for
// tests that present it from outside the server.
func (s *Server) EdgeSecret() string { return s.edgeSecret.String() }
