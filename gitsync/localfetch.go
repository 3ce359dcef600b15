package gitsync

import (
	"context"
	"errors"
	"io"
	"os/exec"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	"github.com/go-git/go-git/v5/plumbing/transport/file"
	"github.com/go-git/go-git/v5/plumbing/transport/server"
)

// A repo given as a local path or a file:// URL is fetched as go-git
// fetches one, by running git-upload-pack, when the host has the git
// command; on a host without it (the release image is distroless) by
// go-git's own upload-pack, in this process, reading the repo's files.
// Without it, every round failed: exec: "git": executable file not found.

func init() {
	client.InstallProtocol("file", localTransport{})
}

// localTransport is the transport of local repos: git's, else go-git's.
type localTransport struct{}

func (localTransport) NewUploadPackSession(ep *transport.Endpoint, auth transport.AuthMethod) (transport.UploadPackSession, error) {
	s, err := file.DefaultClient.NewUploadPackSession(ep, auth)
	if _, ok := errors.AsType[*exec.Error](err); !ok {
		return s, err // git's session, or its error
	}
	// no git command: the repo (a checkout, a bare one, or a linked work
	// tree, whose refs and objects are its main repository's) read here
	repo, err := git.PlainOpenWithOptions(ep.Path, &git.PlainOpenOptions{EnableDotGitCommonDir: true})
	if errors.Is(err, git.ErrRepositoryNotExists) {
		return nil, transport.ErrRepositoryNotFound
	}
	if err != nil {
		return nil, err
	}
	st := repo.Storer
	s, err = server.NewServer(storerLoader{st}).NewUploadPackSession(ep, auth)
	if err != nil {
		closeStorer(st)
		return nil, err
	}
	return &localSession{UploadPackSession: s, st: st}, nil
}

func (localTransport) NewReceivePackSession(ep *transport.Endpoint, auth transport.AuthMethod) (transport.ReceivePackSession, error) {
	return file.DefaultClient.NewReceivePackSession(ep, auth) // never used: nothing is pushed
}

// storerLoader loads the one repo it holds.
type storerLoader struct{ st storer.Storer }

func (l storerLoader) Load(*transport.Endpoint) (storer.Storer, error) { return l.st, nil }

// localSession is go-git's upload-pack over a local repo.
type localSession struct {
	transport.UploadPackSession
	st storer.Storer
}

// UploadPack leaves out the commits the clone has and the repo does not:
// git's upload-pack ignores them, go-git's fails on them (object not
// found), as after a force-push whose dropped commits were pruned.
func (s *localSession) UploadPack(ctx context.Context, req *packp.UploadPackRequest) (*packp.UploadPackResponse, error) {
	known := req.Haves[:0:0]
	for _, h := range req.Haves {
		if s.st.HasEncodedObject(h) == nil {
			known = append(known, h)
		}
	}
	req.Haves = known
	return s.UploadPackSession.UploadPack(ctx, req)
}

func (s *localSession) Close() error {
	err := s.UploadPackSession.Close()
	closeStorer(s.st)
	return err
}

func closeStorer(st storer.Storer) {
	if c, ok := st.(io.Closer); ok {
		c.Close()
	}
}
