package flow

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
)

// CompilerVersion names this compiler in artifacts. It changes whenever the
// compiler would compile the same source differently.
const CompilerVersion = "flowmarkdown-0.1/13"

// The artifact format, byte by byte:
//
//	nexus-flow-artifact 1\n          magic and format version
//	compiler <CompilerVersion>\n      the compiler that published it
//	source <N>\n                      length of the source in bytes, decimal
//	<N bytes of canonical source>
//
// Nothing follows the source. The SHA-256 of these bytes identifies the
// artifact; the registry stores it beside them and checks it on load.
const artifactMagic = "nexus-flow-artifact 1\n"

// Artifact returns the flow's artifact bytes (see the format above). The
// same source always gives the same bytes.
func (f *Flow) Artifact() []byte {
	var b bytes.Buffer
	b.WriteString(artifactMagic)
	b.WriteString("compiler " + CompilerVersion + "\n")
	b.WriteString("source " + strconv.Itoa(len(f.source)) + "\n")
	b.Write(f.source)
	return b.Bytes()
}

// Sum returns the SHA-256 of an artifact.
func Sum(artifact []byte) [32]byte { return sha256.Sum256(artifact) }

// ErrBadArtifact is wrapped by LoadArtifact for bytes that are not an
// artifact.
var ErrBadArtifact = errors.New("not a flow artifact")

// LoadArtifact compiles the source held in an artifact. path names it in
// errors (the source path it was published from). An artifact written by
// another compiler version is compiled by this one from its source.
func LoadArtifact(path string, artifact []byte) (*Flow, error) {
	rest, ok := bytes.CutPrefix(artifact, []byte(artifactMagic))
	if !ok {
		return nil, fmt.Errorf("%s: %w: bad header", path, ErrBadArtifact)
	}
	line, rest, ok := bytes.Cut(rest, []byte("\n"))
	if !ok || !bytes.HasPrefix(line, []byte("compiler ")) {
		return nil, fmt.Errorf("%s: %w: no compiler line", path, ErrBadArtifact)
	}
	line, rest, ok = bytes.Cut(rest, []byte("\n"))
	n, err := strconv.Atoi(string(bytes.TrimPrefix(line, []byte("source "))))
	if !ok || !bytes.HasPrefix(line, []byte("source ")) || err != nil || n != len(rest) {
		return nil, fmt.Errorf("%s: %w: source length does not match", path, ErrBadArtifact)
	}
	return Compile(path, rest)
}
