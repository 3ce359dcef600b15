// Package flow is the FlowMarkdown 0.1 language: it reads a flow file
// (YAML front matter, `## Step:` and `## Fault:` sections, fenced ntd,
// validate and condition blocks), checks every rule of the language, and
// compiles it into an immutable *Flow whose expressions and templates are
// ready to run. Compile errors are reported all at once, each as
// FILE:LINE: message.
//
// The package also owns what those expressions and templates work on: the
// document model (Object keeps key order, numbers keep their digits),
// strict JSON parsing and compact JSON writing, and the header deny list.
//
// A compiled flow travels as an artifact: the flow's canonical source and
// the compiler version (see Artifact and LoadArtifact). Its SHA-256 is over
// those bytes, so a changed compiler or a changed file is a new artifact.
package flow
