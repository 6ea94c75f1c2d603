// Package api holds ration's wire protocol: the protobuf definitions in
// ration.proto and the Go code generated from them (checked in).
//
// Regenerate with `go generate ./api` after `make tools`: protoc 3.21 comes
// from Debian's protobuf-compiler; the plugins are pinned below.
package api

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative ration.proto command.proto check.proto

// Pinned plugin versions (installed by `make tools`):
//
//	google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
