// Package integration holds end-to-end tests over the built nexus binary: a
// real git repo, real HTTP and real processes. It builds the binary and
// talks to it from outside: of the project's packages it imports only a
// test helper (jsonlog/jsonlogtest, to read the log's lines).
package integration
