// Package gitsync owns the host's bare clone of the config repo (go-git):
// fetching the branch, compiling every flow and access.yaml of a commit,
// publishing a valid commit through registry, and the sync lock that lets one
// process at a time fetch and publish when several share a state directory.
package gitsync
