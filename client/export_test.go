package client

// Test helpers shared with the external test package client_test.

// LookupMetric is lookupMetric (metrics_test.go).
var LookupMetric = lookupMetric
