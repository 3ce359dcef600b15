// Package integration holds end-to-end tests over the built nexus binary: a
// real git repo, real HTTP and real processes. It imports none of the
// project's packages; it builds the binary and talks to it from outside.
package integration
