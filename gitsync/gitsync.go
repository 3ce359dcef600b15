package gitsync

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
	"github.com/gofrs/flock"
	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/lifecycle"
	"github.com/nexushq/nexus/registry"
)

// Limits that refuse a commit whole.
const (
	DefaultMaxFileBytes  = 1 << 20  // a file under the flows folder, and access.yaml
	DefaultMaxFiles      = 10000    // entries under the flows folder
	DefaultMaxTotalBytes = 64 << 20 // all the Markdown read from one commit
	// DefaultFetchTimeout bounds a fetch's silence: a server or proxy that
	// takes the connection and then sends nothing for this long ends the
	// round, so that it does not hold the sync lock for ever.
	DefaultFetchTimeout = 2 * time.Minute
	maxDepth            = 64 // nested folders under the flows folder
)

// MaxReportedErrors is how many lines of errors a refused commit records,
// returns and logs at most: past it, the first MaxReportedErrors-1 and a
// last line saying how many more there are. A commit breaking thousands of
// files is refused for all of them, but the registry, /status and the log
// hold a bounded list.
const MaxReportedErrors = 100

// capErrors returns errs, or when there are more than MaxReportedErrors,
// the first MaxReportedErrors-1 and a line saying how many more there are.
func capErrors(errs []string) []string {
	if len(errs) <= MaxReportedErrors {
		return errs
	}
	kept := slices.Clone(errs[:MaxReportedErrors-1])
	return append(kept, fmt.Sprintf("… and %d more errors (nexus validate on a checkout of the commit lists them all)", len(errs)-len(kept)))
}

// Config configures a Syncer. Repo, Dir and Registry are required.
type Config struct {
	// Repo is the config repo: an https://, ssh:// (or user@host:path),
	// file:// URL, or a local path. Credentials in an https URL's user
	// information are sent as basic auth.
	Repo string
	// Branch is the branch to follow; default "main".
	Branch string
	// FlowsDir is the folder of the repo holding the flows; default "flows".
	FlowsDir string
	// Dir is where the bare clone lives ({state}/repo).
	Dir string
	// Poll is the time between fetches; default 10 s.
	Poll time.Duration
	// MaxBackoff caps the wait between fetches of an unreachable repo;
	// default 5 minutes.
	MaxBackoff time.Duration
	// SSHKeyFile is a private key for ssh:// repos; without it the ssh agent
	// (SSH_AUTH_SOCK) is used.
	SSHKeyFile string
	// Registry receives the publications and the refused commits.
	Registry *registry.Registry
	// Logger receives sync_applied, sync_failed, sync_unreachable,
	// sync_error and sync_file_skipped events, and the clone's.
	Logger *slog.Logger
	// MaxFileBytes, MaxFiles and MaxTotalBytes are the operational limits;
	// 0 means the defaults. MaxTotalBytes bounds the Markdown one commit
	// makes the host read (files compress well in git: a small push can
	// hold gigabytes).
	MaxFileBytes  int64
	MaxFiles      int
	MaxTotalBytes int64
	// FetchTimeout bounds how long a fetch's connection may move no byte
	// (a dial, a read or a write); default DefaultFetchTimeout. A transfer
	// that keeps moving may take longer, up to 30 minutes in all. A fetch
	// that times out is an unreachable repo (retried with backoff).
	FetchTimeout time.Duration
	// Observe, when set, is told the outcome of every round the loop runs
	// (for metrics).
	Observe func(Result, error)
	// Started is when the server started; zero means when New is called.
	// Of two servers following different sources (repo, branch or
	// folder) into one registry, the one started later publishes and the
	// other stops (see SupersededError): a rolling change of the source
	// hands over to the new server rather than flapping the live set
	// between the two at every poll.
	Started time.Time
}

// Syncer keeps the bare clone and publishes every good commit of the branch.
type Syncer struct {
	cfg     Config
	lock    *flock.Flock
	trigger chan struct{}

	source string // what it follows, as the registry records it
	// server is this Syncer's lock in the state directory, held while it
	// lives (the kernel lets it go when the process dies): a server it
	// superseded finds it free once it is gone, and publishes again
	// (under lifeMu, and mu to change them: Sync reads them under mu)
	server     *os.File // open, locked (flock) until Stop; nil after it
	serverName string
	lifeMu     sync.Mutex // one Start or Stop at a time

	mu        sync.Mutex // one Sync at a time in this process
	evaluated bool       // a round of this Syncer compiled a head (under mu)
	// repackFailedAt is how many packs the clone held when its last
	// repack failed, 0 when none did (under mu): the next is tried once
	// MaxPacks more have come, not at every round
	repackFailedAt int
	// compiled holds what the last round compiled (under mu): a commit
	// that changes one flow of thousands compiles that one
	compiled flow.CompileCache
	// clones are the storages of the clone this round opened (under mu),
	// closed at its end (closeClones): each keeps pack files open
	clones []io.Closer
	life   lifecycle.Loop
}

// SupersededError is the error of a round that did not run because
// another server, started later and running still, follows another source
// (a repo, branch or folder) into the same registry and published it: the
// later server wins, and this one publishes again once that one has ended
// (or when restarted, which makes it the later one).
type SupersededError struct {
	Source  string    // what the other server follows
	Started time.Time // when it started
	Own     string    // what this one follows
}

func (e *SupersededError) Error() string {
	return fmt.Sprintf("another server, started later (%s), publishes %s into this state directory: this one follows %s and publishes nothing while that one runs (stop one of them)",
		e.Started.UTC().Format(time.RFC3339), e.Source, e.Own)
}

// New checks cfg and returns a Syncer. It does not touch the network.
func New(cfg Config) (*Syncer, error) {
	if cfg.Repo == "" || cfg.Dir == "" || cfg.Registry == nil {
		return nil, errors.New("gitsync: Repo, Dir and Registry are required")
	}
	if cfg.Branch == "" {
		cfg.Branch = "main"
	}
	if cfg.FlowsDir == "" {
		cfg.FlowsDir = "flows"
	}
	if err := CheckSource(cfg.Repo, cfg.Branch, cfg.FlowsDir); err != nil {
		return nil, fmt.Errorf("gitsync: %w", err)
	}
	cfg.FlowsDir = cleanFlowsDir(cfg.FlowsDir)
	if cfg.Poll <= 0 {
		cfg.Poll = 10 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = DefaultMaxFileBytes
	}
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = DefaultMaxFiles
	}
	if cfg.MaxTotalBytes <= 0 {
		cfg.MaxTotalBytes = DefaultMaxTotalBytes
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = DefaultFetchTimeout
	}
	if cfg.Started.IsZero() {
		cfg.Started = time.Now()
	}
	// the state directory is its owner's alone (queue.DirMode, which this
	// package does not import)
	if err := os.MkdirAll(filepath.Dir(cfg.Dir), 0o700); err != nil {
		return nil, fmt.Errorf("gitsync: %w", err)
	}
	// the clone and its lock are the state directory's, which holds no
	// symbolic links (see queue.ErrLink): one planted there would make the
	// sync write wherever it points
	if info, err := os.Lstat(cfg.Dir); err == nil && info.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("gitsync: %s is a symbolic link: the state directory must hold no symbolic links", cfg.Dir)
	} else if err == nil && info.IsDir() && info.Mode().Perm()&0o077 != 0 {
		// a clone an earlier version made open to everyone (see open);
		// one this user cannot change is left for open to report
		_ = os.Chmod(cfg.Dir, info.Mode().Perm()&0o700)
	}
	s := &Syncer{
		cfg:     cfg,
		lock:    flock.New(cfg.Dir+".lock", flock.SetFlag(os.O_CREATE|os.O_RDONLY|syscall.O_NOFOLLOW)),
		trigger: make(chan struct{}, 1),
	}
	s.source = fmt.Sprintf("%s (branch %s, folder %s)", s.remoteURL(), cfg.Branch, cfg.FlowsDir)
	if err := s.lockServer(); err != nil {
		return nil, fmt.Errorf("gitsync: %w", err)
	}
	return s, nil
}

// serversDir is the folder of the servers' locks: {state}/repo.servers.
func (s *Syncer) serversDir() string { return s.cfg.Dir + ".servers" }

// lockServer makes and locks this Syncer's file in serversDir, named by a
// random id: the registry records the name with every publication.
func (s *Syncer) lockServer() error {
	if err := os.Mkdir(s.serversDir(), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if info, err := os.Lstat(s.serversDir()); err != nil || !info.IsDir() {
		return fmt.Errorf("%s is not a folder: the state directory must hold no symbolic links", s.serversDir())
	}
	// the files of servers that died (killed: Stop did not run, or
	// while making theirs) go; not one made in the last minute, which a
	// server starting at this moment may not have locked yet
	if entries, err := os.ReadDir(s.serversDir()); err == nil {
		for _, e := range entries {
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Minute {
				s.serverGone(e.Name())
			}
		}
	}
	// made, locked and written under a name no reader looks at, then
	// renamed: a server reading the locks (laterReplica) never locks one
	// being made, which would make its owner's lock fail, nor reads an
	// empty one
	id := fmt.Sprintf("%016x", rand.Uint64())
	name := id + ".lock"
	path := filepath.Join(s.serversDir(), name)
	making := filepath.Join(s.serversDir(), id+".making")
	f, err := os.OpenFile(making, os.O_CREATE|os.O_EXCL|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		f.Close()
		os.Remove(making)
		return err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fail(fmt.Errorf("locking %s: %w", making, err))
	}
	// what it follows and when it started, for a server its source
	// superseded to find it (laterReplica)
	b, _ := json.Marshal(serverRecord{Source: s.source, Started: s.cfg.Started})
	if _, err := f.Write(b); err != nil {
		return fail(fmt.Errorf("writing %s: %w", making, err))
	}
	if err := os.Rename(making, path); err != nil {
		return fail(err)
	}
	// the rename synced, as every rename in the state directory is
	// (the lock itself ends with the process whatever the disk holds)
	if d, err := os.Open(s.serversDir()); err == nil {
		d.Sync()
		d.Close()
	}
	s.server, s.serverName = f, name
	return nil
}

// serverRecord is what a server's lock file holds: one JSON object.
type serverRecord struct {
	Source  string    `json:"source"`
	Started time.Time `json:"started"`
}

// laterReplica returns when the latest running server that follows source
// and started after this one started, from the servers' lock files: the
// replicas of a source that superseded this server, which hold it once
// the one that published last has ended. Nothing is removed.
func (s *Syncer) laterReplica(source string) (time.Time, bool) {
	entries, err := os.ReadDir(s.serversDir())
	if err != nil {
		return time.Time{}, false
	}
	var latest time.Time
	for _, e := range entries {
		if e.Name() == s.serverName || !strings.HasSuffix(e.Name(), ".lock") {
			continue
		}
		rec, ok := readRunningServer(filepath.Join(s.serversDir(), e.Name()))
		if ok && rec.Source == source && rec.Started.After(s.cfg.Started) && rec.Started.After(latest) {
			latest = rec.Started
		}
	}
	return latest, !latest.IsZero()
}

// readRunningServer reads the server lock file at path when a server
// holds it locked.
func readRunningServer(path string) (serverRecord, bool) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return serverRecord{}, false
	}
	defer f.Close()
	// a shared lock taken is a file no server holds: let it go at once
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return serverRecord{}, false
	} else if !errors.Is(err, syscall.EWOULDBLOCK) {
		return serverRecord{}, false
	}
	b, err := io.ReadAll(io.LimitReader(f, 4<<10))
	var rec serverRecord
	if err != nil || json.Unmarshal(b, &rec) != nil {
		return serverRecord{}, false
	}
	return rec, true
}

// serverGone reports whether the server whose lock is name (as the
// registry recorded it) has ended: its file is missing, or free to lock.
// The file of a server found gone is removed.
func (s *Syncer) serverGone(name string) bool {
	if name == "" || strings.ContainsAny(name, `/\`) || !strings.HasSuffix(name, ".lock") && !strings.HasSuffix(name, ".making") ||
		name == ".lock" || name == ".making" {
		return true // not a name this package writes
	}
	path := filepath.Join(s.serversDir(), name)
	l := flock.New(path, flock.SetFlag(os.O_RDONLY|syscall.O_NOFOLLOW))
	locked, err := l.TryLock()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return true
	case err != nil || !locked:
		return false // held, or unknown: the other server stands
	}
	os.Remove(path)
	l.Unlock()
	return true
}

// CheckSource checks what a Syncer would follow: the repo (a URL whose
// scheme git speaks here, https://, http://, ssh:// or file://, or a path
// or scp-like user@host:path; not git://, see errGitProtocol), the
// branch's name, and the flows folder (not the repo's root). It touches
// nothing; its errors name the value (never a URL, which may hold a
// password) in one line.
func CheckSource(repo, branch, flowsDir string) error {
	if scheme, _, ok := strings.Cut(repo, "://"); ok {
		u, err := url.Parse(repo)
		if err != nil {
			return &SourceError{"Repo", errors.New("the repo URL does not parse; in a user name or password, write '#', '%', '/', '?' and '@' percent-encoded (%23, %25, %2F, %3F, %40)")}
		}
		switch strings.ToLower(u.Scheme) {
		case "https", "http", "ssh", "file":
		case "git":
			return &SourceError{"Repo", errGitProtocol}
		default:
			return &SourceError{"Repo", fmt.Errorf("the repo URL's scheme %q is not one git speaks here: give an https://, http://, ssh:// or file:// URL, or a local path", scheme)}
		}
		if u.RawQuery != "" || u.ForceQuery || strings.Contains(repo, "#") {
			// go-git appends its own path (/info/refs?service=…) to the
			// URL as written, after the query or fragment: no fetch
			// could work
			return &SourceError{"Repo", errors.New("the repo URL has a query string or a fragment, which git cannot fetch with (it adds its own path after the URL): give a token as the URL's user name, https://TOKEN@host/…")}
		}
	}
	// (HEAD passes the reference rules, and git check-ref-format --branch
	// refuses it: no branch is called that)
	if err := plumbing.NewBranchReferenceName(branch).Validate(); err != nil || branch == "" || branch == "HEAD" ||
		strings.ContainsAny(branch, " :") || strings.HasPrefix(branch, "-") {
		return &SourceError{"Branch", fmt.Errorf("%q is not a branch name", branch)}
	}
	if slices.ContainsFunc(strings.Split(filepath.ToSlash(flowsDir), "/"), func(e string) bool { return strings.EqualFold(e, ".git") }) {
		// git commits no .git entry: the folder could never be found,
		// and the clone was blamed (cloned anew at every round)
		return &SourceError{"FlowsDir", fmt.Errorf("the flows folder %q is in a .git folder, which no commit holds: give a folder of the repo, such as flows", flowsDir)}
	}
	slashed := filepath.ToSlash(flowsDir)
	if c := path.Clean(slashed); c == ".." || strings.HasPrefix(c, "../") {
		// cleaned as New cleans it, ../etc would be read as etc/, a
		// folder the operator did not name; a ".." that stays inside
		// the repo (flows/acme/..) names the folder it leads to, as
		// ./flows and flows/ name flows
		return &SourceError{"FlowsDir", fmt.Errorf("the flows folder %q leaves the repo: give a folder inside it, such as flows", flowsDir)}
	}
	if cleanFlowsDir(flowsDir) == "" {
		return &SourceError{"FlowsDir", fmt.Errorf("the flows folder %q is the repo's root: flows live in a folder of the repo, such as flows", flowsDir)}
	}
	if path.IsAbs(slashed) {
		// cleaned, /srv/flows would be read as srv/flows of the repo
		return &SourceError{"FlowsDir", fmt.Errorf("the flows folder %q is an absolute path: give a folder of the repo, such as flows", flowsDir)}
	}
	return nil
}

// errGitProtocol is CheckSource's refusal of a git:// repo. go-git
// dials the git protocol with a plain net.Dial that nothing can watch, so
// a server that takes the connection and says nothing would hold the round
// (and the sync lock every process shares) for maxFetchTime, not
// FetchTimeout; and the protocol neither authenticates the server nor
// protects what it sends, which here is the code the host runs and its
// access keys.
var errGitProtocol = errors.New("a git:// repo is not followed: the git protocol has no authentication or encryption, and a silent server could not be timed out; give the repo's https:// or ssh:// URL")

// SourceError is CheckSource's refusal of one setting.
type SourceError struct {
	Field string // the Config field refused: Repo, Branch or FlowsDir
	Err   error
}

func (e *SourceError) Error() string { return e.Err.Error() }
func (e *SourceError) Unwrap() error { return e.Err }

// cleanFlowsDir is the flows folder as a slash path inside the repo, ""
// for its root.
func cleanFlowsDir(dir string) string {
	return strings.Trim(path.Clean("/"+filepath.ToSlash(dir)), "/")
}

// Result is what one Sync did.
type Result struct {
	// Commit is the branch's head after the fetch ("" when skipped).
	Commit string
	// Skipped says why nothing was compiled: SkippedUpToDate,
	// SkippedRefused or SkippedLocked.
	Skipped string
	// Changes are the publication's changes, when the commit was applied.
	Changes []registry.Change
	// Errors are the refused commit's errors (FILE:LINE: message), at
	// most MaxReportedErrors lines, the last saying how many more there
	// are when there are more.
	Errors []string
}

// The reasons a Result gives for a round that compiled nothing.
const (
	// SkippedUpToDate: the branch's head is the live commit.
	SkippedUpToDate = "up to date"
	// SkippedRefused: the branch's head is the commit last refused.
	SkippedRefused = "already refused"
	// SkippedLocked: another process held the sync lock and ran the round.
	SkippedLocked = "another process is syncing"
)

// Applied reports whether the commit was published.
func (r Result) Applied() bool { return r.Skipped == "" && len(r.Errors) == 0 && r.Commit != "" }

// Sync runs one round: take the sync lock, fetch the branch, and when its
// head is new, compile it and publish it (or record why it was refused).
// The error is for a round that could not run (the repo unreachable, the
// registry unwritable); a refused commit is a Result with Errors.
func (s *Syncer) Sync(ctx context.Context) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.server == nil {
		return Result{}, errStopped
	}
	locked, err := s.lock.TryLock()
	if err != nil {
		return Result{}, fmt.Errorf("taking the sync lock %s: %w", s.lock.Path(), err)
	}
	if !locked {
		return Result{Skipped: SkippedLocked}, nil
	}
	defer s.lock.Unlock()
	// the last thing the round does (after the packing of the clone)
	defer s.closeClones()
	// before the clone is touched: servers following different repos
	// share it, and the clone of one would be made again for the other
	if err := s.checkSuperseded(ctx); err != nil {
		return Result{}, err
	}

	repo, err := s.open()
	var commit *object.Commit
	if err == nil {
		commit, err = s.fetch(ctx, repo)
	}
	if damage := (*cloneDamage)(nil); errors.As(err, &damage) {
		repo, commit, err = s.reclone(ctx, damage)
	}
	if err != nil {
		return Result{}, err
	}
	// at the end of the round, when nothing reads the clone through repo
	// any more: go-git keeps the indexes of the packs a repack deletes, and
	// reading through them fails (which a round would take for damage)
	defer s.packClone(ctx, repo)
	res := Result{Commit: commit.Hash.String()}
	st, err := s.cfg.Registry.Status(ctx)
	if err != nil {
		return res, fmt.Errorf("reading the sync state: %w", err)
	}
	switch {
	case !s.evaluated:
		// the first round of this process compiles the head whatever the
		// registry says: a commit is only "up to date" or "already
		// refused" for the settings and the compiler that judged it, and
		// a restart is how both change (--flows-dir, a new nexus)
	case st.Source.Name != "" && st.Source.Name != s.source:
		// the registry holds another source's set or refusal (a server
		// that superseded this one has ended): its commit may be this
		// head, compiled from another branch's folder or under other
		// settings, so the head is judged again and its set published
	case st.LastError != nil && st.LastError.Commit == res.Commit:
		// the live commit itself, when this process's first round refused
		// it (settings or a compiler that judge it otherwise): it stays
		// reported, as any refused head does
		res.Skipped = SkippedRefused
		return res, nil
	case st.Commit == res.Commit:
		res.Skipped = SkippedUpToDate
		if err := s.cfg.Registry.ConfirmSync(ctx, res.Commit); err != nil {
			return res, fmt.Errorf("recording the sync: %w", err)
		}
		if st.LastError != nil {
			// the refused commit is no longer the branch's head (the branch
			// went back to the live commit): its failure is history
			if err := s.cfg.Registry.ClearSyncFailure(ctx); err != nil {
				return res, fmt.Errorf("clearing the refused commit: %w", err)
			}
		}
		return res, nil
	}

	// the commit is judged against the live flows as the registry has
	// them: another process sharing it may have published since this
	// one's watcher last looked (publications from git happen only under
	// the sync lock, held here)
	if _, err := s.cfg.Registry.Refresh(ctx); err != nil {
		return res, fmt.Errorf("reading the live flows: %w", err)
	}
	flows, keys, problems, damage := s.compile(repo, commit)
	if damage != nil {
		// an object the commit names cannot be read from the clone: that
		// is the clone's fault (a crash or a power cut while go-git wrote
		// it), never the commit's
		if repo, commit, err = s.reclone(ctx, damage); err != nil {
			return res, err
		}
		res.Commit = commit.Hash.String()
		if flows, keys, problems, damage = s.compile(repo, commit); damage != nil {
			return res, fmt.Errorf("the clone lacks objects of commit %s even when cloned anew: %w", short(res.Commit), damage)
		}
	}
	s.evaluated = true
	if len(problems) > 0 {
		res.Errors = capErrors(problems)
		if err := s.cfg.Registry.RecordSyncFailure(ctx, res.Commit, res.Errors, s.syncSource(st)); err != nil {
			return res, fmt.Errorf("recording the refused commit %s: %w", short(res.Commit), err)
		}
		// the errors as /status lists them (a commit breaking thousands
		// of files makes one bounded line), and how many there are
		keeps := "the last good commit keeps serving"
		switch {
		case st.Commit == "" && st.Flows > 0:
			keeps = "the flows deployed keep serving" // by nexus deploy
		case st.Commit == "":
			keeps = "nothing is deployed yet" // a first commit refused
		}
		s.cfg.Logger.Error("commit refused: "+keeps,
			"event", "sync_failed", "commit", res.Commit, "error_count", len(problems),
			"errors", res.Errors)
		return res, nil
	}
	// a commit that changes access.yaml alone (a key revoked, a rate set)
	// publishes no flow: the line says so
	var before []byte
	if live := s.cfg.Registry.Live(); live != nil {
		before = live.Access().Source()
	}
	res.Changes, err = s.cfg.Registry.Publish(ctx, registry.Publication{
		Flows: flows, Complete: true, Access: keys, Commit: res.Commit, Source: s.syncSource(st),
	})
	if err != nil {
		return res, fmt.Errorf("publishing commit %s: %w", short(res.Commit), err)
	}
	if _, err := s.cfg.Registry.Load(ctx); err != nil {
		return res, fmt.Errorf("loading the live set of commit %s: %w", short(res.Commit), err)
	}
	counts := map[registry.Action]int{}
	for _, c := range res.Changes {
		counts[c.Action]++
	}
	s.cfg.Logger.Info("commit applied", "event", "sync_applied", "commit", res.Commit, "flows", len(flows),
		"published", counts[registry.Published], "unchanged", counts[registry.Unchanged], "withdrawn", counts[registry.Withdrawn],
		"keys", keys.Len(), "access_changed", !bytes.Equal(before, keys.Source()))
	return res, nil
}

// checkSuperseded returns a *SupersededError when the registry's last
// publication from git was of another source by a server started later
// than this one, which still runs or has a replica started later than
// this one that does (under the sync lock: no publication from git runs
// meanwhile).
func (s *Syncer) checkSuperseded(ctx context.Context) error {
	st, err := s.cfg.Registry.Status(ctx)
	if err != nil {
		return fmt.Errorf("reading the sync state: %w", err)
	}
	src := st.Source
	if src.Name == "" || src.Name == s.source {
		return nil
	}
	if s.laterAndRunning(src) {
		return &SupersededError{Source: src.Name, Started: src.Started, Own: s.source}
	}
	// the server that published it has ended, or started before this
	// one (an older replica records its own start), but a replica of its
	// source that started after this one may run still: publishing now
	// would flip the live set until that replica's next round
	if started, ok := s.laterReplica(src.Name); ok {
		return &SupersededError{Source: src.Name, Started: started, Own: s.source}
	}
	return nil
}

// laterAndRunning reports whether the server that recorded src started
// after this one and still runs.
func (s *Syncer) laterAndRunning(src registry.SyncSource) bool {
	return src.Started.After(s.cfg.Started) && !s.serverGone(src.Server)
}

// syncSource is the source this server records with what it publishes
// or refuses: its own, unless st (the registry's, read in this round)
// holds a claim to the same source by a replica started later and running
// still, which stands. A replica older than a server its source
// superseded would otherwise hand the registry back to that server.
func (s *Syncer) syncSource(st registry.Status) registry.SyncSource {
	if src := st.Source; src.Name == s.source && s.laterAndRunning(src) {
		return src
	}
	return registry.SyncSource{Name: s.source, Started: s.cfg.Started, Server: s.serverName}
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// MaxPacks is how many packs the clone holds at most after a round: each
// fetch that brings objects adds one, and every round reads each pack's
// index again (the clone is opened anew), so a host whose repo took a
// commit at every poll spent more and more of its time reading indexes
// (0.17 ms of CPU a pack a poll: 80 ms a poll after 475 commits). Past
// MaxPacks the round packs the small packs into one, or the whole clone
// (rollUpOrRepack).
const MaxPacks = 16

// packClone packs the clone's packs when it holds more than MaxPacks: the
// small ones into one, or now and then every object the references reach
// into one (planRollUp; the whole clone also drops the objects a
// force-push left behind). A failure is logged and left: the clone still
// holds its packs, and one a crash left half done is damage, which the
// next round repairs by cloning anew. After a failure the next try waits
// for MaxPacks more packs, so that a clone that cannot be packed does not
// cost a walk of its history and a warning at every poll. A packing
// stops when ctx (the round's) ends, and a round that ended starts none:
// Stop waited for a packing of the whole clone, seconds for a long history.
func (s *Syncer) packClone(ctx context.Context, repo *git.Repository) {
	pos, ok := repo.Storer.(storer.PackedObjectStorer)
	if !ok || ctx.Err() != nil {
		return // a round that ended (Stop) does not start a packing
	}
	packs, err := pos.ObjectPacks()
	if err != nil || !s.repackDue(len(packs)) {
		return
	}
	start := time.Now()
	packed, whole, err := rollUpOrRepack(ctx, repo)
	if err != nil && ctx.Err() != nil {
		return // stopped with the round, the clone as it was: not a failure
	}
	if err != nil {
		s.repackFailedAt = len(packs)
		s.cfg.Logger.Warn("the clone's packs could not be packed; tried again once it holds more", "event", "sync_repack_failed",
			"packs", len(packs), "next_try_at_packs", len(packs)+MaxPacks, "whole", whole, "error", err.Error())
		return
	}
	s.repackFailedAt = 0
	s.cfg.Logger.Info("the clone's packs were packed", "event", "sync_repacked",
		"packs", len(packs), "packed", packed, "whole", whole, "duration_ms", time.Since(start).Milliseconds())
}

// repackDue tells whether a clone holding packs packs is packed at the
// end of this round: past MaxPacks, and after a failed repack only once
// MaxPacks more have come.
func (s *Syncer) repackDue(packs int) bool {
	return packs > MaxPacks && (s.repackFailedAt == 0 || packs >= s.repackFailedAt+MaxPacks)
}

// reclone removes a damaged clone and fetches the branch into a new one,
// logging sync_repaired with the damage found. The clone is only a cache
// of the remote (the registry holds what is live), so a crash or a power
// cut while go-git wrote it (a pack renamed into place but not synced, a
// ref naming a commit whose objects were lost) costs one full fetch, not
// a refused commit or a sync that fails for ever.
func (s *Syncer) reclone(ctx context.Context, damage error) (*git.Repository, *object.Commit, error) {
	s.cfg.Logger.Warn("the clone is damaged; cloning the repo anew", "event", "sync_repaired", "error", damage.Error())
	s.repackFailedAt = 0 // a new clone: its packs are counted afresh
	s.closeClones()
	if err := os.RemoveAll(s.cfg.Dir); err != nil {
		return nil, nil, fmt.Errorf("removing the damaged clone %s: %w", s.cfg.Dir, err)
	}
	repo, err := s.open()
	if err != nil {
		return nil, nil, err
	}
	commit, err := s.fetch(ctx, repo)
	if err != nil {
		return nil, nil, err
	}
	return repo, commit, nil
}

// open opens the bare clone, creating it on first use, with its origin
// pointing at the configured repo.
func (s *Syncer) open() (*git.Repository, error) {
	repo, err := openClone(s.cfg.Dir)
	s.track(repo)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		// the owner's alone, as the state directory around it should be
		// (go-git would make it 0755, and its files 0644: the flows'
		// sources, which may carry a downstream's credentials, and
		// access.yaml, readable by every user of a state directory left
		// open)
		if err := os.Mkdir(s.cfg.Dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("making the clone %s: %w", s.cfg.Dir, err)
		}
		if repo, err = git.Init(cloneStorage(s.cfg.Dir), nil); err != nil {
			return nil, fmt.Errorf("making the clone %s: %w", s.cfg.Dir, err)
		}
		s.track(repo)
	}
	if err != nil {
		err = fmt.Errorf("opening the clone %s: %w", s.cfg.Dir, err)
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			return nil, err // the process's, not the clone's: removing it would not help
		}
		// a clone that exists but cannot be opened (its config or HEAD
		// torn by a crash while go-git rewrote it) is damage: the clone
		// is a cache of the remote, cloned anew
		return nil, &cloneDamage{err}
	}
	remoteURL := s.remoteURL()
	remote, err := repo.Remote("origin")
	switch {
	case errors.Is(err, git.ErrRemoteNotFound):
	case err != nil:
		return nil, &cloneDamage{fmt.Errorf("reading the clone's origin: %w", err)}
	case len(remote.Config().URLs) == 1 && remote.Config().URLs[0] == remoteURL:
		return repo, nil
	default:
		if err := repo.DeleteRemote("origin"); err != nil {
			return nil, fmt.Errorf("updating the clone's origin: %w", err)
		}
	}
	_, err = repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{remoteURL}})
	if err != nil {
		return nil, fmt.Errorf("setting the clone's origin: %w", err)
	}
	return repo, nil
}

// track keeps repo's storage (nil: none) for closeClones.
func (s *Syncer) track(repo *git.Repository) {
	if repo == nil {
		return
	}
	if c, ok := repo.Storer.(io.Closer); ok {
		s.clones = append(s.clones, c)
	}
}

// closeClones closes the storages of the clone the round opened, and the
// pack files they keep open. Nothing reads through them after it.
func (s *Syncer) closeClones() {
	for _, c := range s.clones {
		c.Close()
	}
	s.clones = nil
}

// largeObjectBytes is the size above which an object of the clone's
// packs is streamed from its pack when read, not decompressed into memory
// whole (go-git's LargeObjectThreshold; by default it reads every object
// whole). A packing of the clone (packClone) reads every object: a 100 MB
// file anywhere in the repo's history took 600 MB of allocations and a
// 350 MB heap at every repack. Every file git sync reads (flows,
// access.yaml) is at most MaxFileBytes, under it by default.
const largeObjectBytes = 1 << 20

// openPacks is the most pack files a clone's storage keeps open
// (go-git's MaxOpenDescriptors). Without it, go-git opened a pack, read
// its index again and closed it for every object it read: a round reading
// 1,000 flows opened the pack 2,000 times, most of its time. A clone holds
// at most MaxPacks after a round, one more during it.
const openPacks = 2 * MaxPacks

// cloneStorage is the storage of the bare clone in dir. It keeps up to
// openPacks pack files open until it is closed (Syncer.closeClones).
func cloneStorage(dir string) *filesystem.Storage {
	return filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRUDefault(),
		filesystem.Options{LargeObjectThreshold: largeObjectBytes, MaxOpenDescriptors: openPacks})
}

// openClone opens the bare clone in dir, as git.PlainOpen does, with its
// storage's options (cloneStorage).
func openClone(dir string) (*git.Repository, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, git.ErrRepositoryNotExists
	} else if err != nil {
		return nil, err
	}
	return git.Open(cloneStorage(dir), nil)
}

// remoteURL is the repo URL without credentials (they go in auth), as the
// clone's configuration, errors and logs hold it: an http(s) URL loses its
// user information, an ssh URL its password.
func (s *Syncer) remoteURL() string {
	u, err := url.Parse(s.cfg.Repo)
	if err != nil || u.Scheme == "" {
		if abs, aerr := filepath.Abs(s.cfg.Repo); aerr == nil && !strings.Contains(s.cfg.Repo, ":") {
			return abs // a local path
		}
	}
	if err == nil && u.User != nil && (u.Scheme == "http" || u.Scheme == "https") {
		u.User = nil
		return u.String()
	}
	return Redact(s.cfg.Repo)
}

// Redact returns repo as logs and errors may show it: an http or https
// URL's user information shows as "redacted", whatever its shape (a token
// may be the user name, the password or both: https://TOKEN@host/…,
// https://TOKEN:x-oauth-basic@github.com/…); another URL keeps its user
// name (ssh's git@) but not its password; a query string or a fragment
// (New refuses both) shows as "redacted"; one that does not parse (New refuses it) is
// reduced to its scheme. A local path or user@host:path is
// returned as is.
func Redact(repo string) string {
	scheme, _, isURL := strings.Cut(repo, "://")
	if !isURL {
		return repo
	}
	u, err := url.Parse(repo)
	if err != nil {
		return scheme + "://(a URL that does not parse)"
	}
	if u.RawQuery != "" {
		u.RawQuery = "redacted" // CheckSource refuses it; a token may be in it
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = "redacted", "" // the same
	}
	if u.User != nil {
		switch {
		case u.Scheme == "http" || u.Scheme == "https":
			// a token may be the user name (https://TOKEN@host/…,
			// https://TOKEN:x-oauth-basic@github.com/…): none of it shows
			u.User = url.User("redacted")
		default:
			u.User = url.User(u.User.Username()) // ssh's git@, without a password
		}
	}
	return u.String()
}

// auth is the credentials of a fetch watched by w, and what to call once
// it is done (never nil): a fetch signing with the ssh agent holds a
// connection to it, which w watches as it watches the remote's (an agent
// silent for FetchTimeout ends the round).
func (s *Syncer) auth(w *fetchWatch) (transport.AuthMethod, func(), error) {
	done := func() {}
	ep, err := transport.NewEndpoint(s.cfg.Repo)
	if err != nil {
		return nil, done, fmt.Errorf("repo %s: %w", Redact(s.cfg.Repo), err)
	}
	switch ep.Protocol {
	case "http", "https":
		if ep.User != "" || ep.Password != "" {
			return &githttp.BasicAuth{Username: ep.User, Password: ep.Password}, done, nil
		}
	case "ssh":
		user := ep.User
		if user == "" {
			user = "git"
		}
		if s.cfg.SSHKeyFile != "" {
			a, err := gitssh.NewPublicKeysFromFile(user, s.cfg.SSHKeyFile, "")
			if err != nil {
				return nil, done, fmt.Errorf("ssh key %s: %w", s.cfg.SSHKeyFile, err)
			}
			return a, done, nil
		}
		// the agent dialled here, not by go-git's NewSSHAgentAuth, which
		// drops the connection it makes: each round left one open (to
		// the host and to the agent) until the garbage collector closed it
		sock := os.Getenv("SSH_AUTH_SOCK")
		if sock == "" {
			return nil, done, errors.New("ssh: no key given and no agent: SSH_AUTH_SOCK is not set")
		}
		conn, err := net.Dial("unix", sock)
		if err != nil {
			return nil, done, fmt.Errorf("ssh: no key given and no agent: connecting to SSH_AUTH_SOCK: %w", err)
		}
		// watched: go-git signs during the ssh handshake, which the
		// fetch's context does not reach, so an agent that never answered
		// held the round (and the sync lock, and Stop) for ever
		wc := w.watchConn(conn)
		return &gitssh.PublicKeysCallback{User: user, Callback: agent.NewClient(wc).Signers}, func() { wc.Close() }, nil
	}
	return nil, done, nil
}

// CheckSSHKey checks that the file at path is a private key a fetch over
// ssh can use: readable, and not protected by a passphrase (nothing could
// type it). Its error is one line that does not repeat the path.
func CheckSSHKey(path string) error {
	b, err := os.ReadFile(path)
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	} else if err != nil {
		return err
	}
	_, err = xssh.ParsePrivateKey(b)
	if _, ok := errors.AsType[*xssh.PassphraseMissingError](err); ok {
		return errors.New("the key is protected by a passphrase: give one without (nothing could type it)")
	} else if err != nil {
		return fmt.Errorf("not a private key: %w", err)
	}
	return nil
}

// CheckKnownHosts checks that a fetch over ssh finds a known_hosts file to
// check the server's host key against, as go-git looks for one: the files
// SSH_KNOWN_HOSTS lists, else ~/.ssh/known_hosts and
// /etc/ssh/ssh_known_hosts (the release image has neither). Its error is
// one line.
func CheckKnownHosts() error {
	_, err := gitssh.NewKnownHostsCallback()
	if err != nil && strings.HasPrefix(err.Error(), "unable to find any valid known_hosts file") {
		if list := os.Getenv("SSH_KNOWN_HOSTS"); list != "" {
			return fmt.Errorf("no file SSH_KNOWN_HOSTS lists (%s) exists", list)
		}
		return errors.New("neither ~/.ssh/known_hosts nor /etc/ssh/ssh_known_hosts exists, and SSH_KNOWN_HOSTS is not set")
	}
	if err != nil && os.Getenv("SSH_KNOWN_HOSTS") == "" {
		return fmt.Errorf("looking for ~/.ssh/known_hosts: %w, and SSH_KNOWN_HOSTS is not set", err) // $HOME unset
	}
	return err
}

// UsesSSH reports whether repo is fetched over ssh (ssh:// or the
// scp-like user@host:path), which needs a key file or an ssh agent.
func UsesSSH(repo string) bool {
	ep, err := transport.NewEndpoint(repo)
	return err == nil && ep.Protocol == "ssh"
}

// fetch brings the branch up to date (full depth) and returns its head.
func (s *Syncer) fetch(ctx context.Context, repo *git.Repository) (*object.Commit, error) {
	remoteRef := plumbing.NewRemoteReferenceName("origin", s.cfg.Branch)
	spec := config.RefSpec("+" + plumbing.NewBranchReferenceName(s.cfg.Branch).String() + ":" + remoteRef.String())
	// the connections are watched (fetchconn.go): a remote silent for
	// FetchTimeout ends the round; maxFetchTime caps a slow transfer
	ctx, cancel := context.WithTimeout(ctx, maxFetchTime)
	defer cancel()
	ctx, w, proxyURL, unwatch := watch(ctx, s.cfg.FetchTimeout)
	defer unwatch()
	auth, authDone, err := s.auth(w)
	defer authDone()
	if err != nil {
		return nil, err
	}
	opts := &git.FetchOptions{
		RemoteName: "origin",
		RefSpecs:   []config.RefSpec{spec},
		Auth:       auth,
		Tags:       git.NoTags,
		Force:      true,
	}
	if UsesSSH(s.cfg.Repo) {
		opts.ProxyOptions = transport.ProxyOptions{URL: proxyURL}
	}
	s.removePartPacks() // a killed process's
	err = repo.FetchContext(ctx, opts)
	if errors.Is(err, dotgit.ErrEmptyRefFile) {
		// go-git rewrites a ref file in place, so a crash can leave it
		// empty, and every fetch then fails; the clone's refs are only a
		// cache of the remote's branch, so the empty ones go and the
		// fetch writes them anew
		removed, rerr := s.removeEmptyRefs()
		s.cfg.Logger.Warn("the clone had empty ref files; fetching them anew", "event", "sync_repaired",
			"removed", strings.Join(removed, ","), "error", err.Error())
		if rerr != nil {
			return nil, fmt.Errorf("removing the clone's empty refs: %w", rerr)
		}
		err = repo.FetchContext(ctx, opts)
	}
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		switch {
		case w.timedOut.Load():
			err = fmt.Errorf("no answer within %v: %w", s.cfg.FetchTimeout, err)
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			err = fmt.Errorf("not done within %v: %w", maxFetchTime, err)
		}
		s.removePartPacks()
		if s.cloneWriteError(err) {
			// this host's disk, not the remote: a sync_error, which an
			// operator looks for on the host
			return nil, fmt.Errorf("writing what was fetched into the clone %s: %w", s.cfg.Dir, err)
		}
		return nil, newFetchError(fmt.Errorf("fetching %s from %s: %w", s.cfg.Branch, s.remoteURL(), err))
	}
	ref, err := repo.Reference(remoteRef, true)
	if err != nil {
		return nil, fmt.Errorf("branch %s of %s: %w", s.cfg.Branch, s.remoteURL(), err)
	}
	commit, err := repo.CommitObject(ref.Hash())
	if err != nil {
		// fetched, yet not readable: the clone is damaged
		return nil, &cloneDamage{fmt.Errorf("reading commit %s: %w", ref.Hash(), err)}
	}
	return commit, nil
}

// removePartPacks removes the files go-git writes a pack into before it
// is whole (objects/pack/tmp_pack_*, and tmp_obj_* for a loose object).
// go-git removes one only when the pack is empty: a fetch cut short (the
// remote killed or silent, the connection dropped, the round stopped)
// leaves what it received, and a remote that dropped every fetch of a
// large repo half way filled the disk a poll at a time. It runs under the
// sync lock, so no fetch or repack is writing one. A file it cannot remove
// is left: the fetch that follows says what is wrong with the clone.
func (s *Syncer) removePartPacks() {
	for _, pattern := range []string{"tmp_pack_*", "tmp_obj_*"} {
		parts, _ := filepath.Glob(filepath.Join(s.cfg.Dir, "objects", "pack", pattern)) // only ErrBadPattern
		for _, p := range parts {
			_ = os.Remove(p)
		}
	}
}

// cloneWriteError reports whether err, a fetch's, is the clone's own
// file system refusing a write (a full or read-only disk, a file or folder
// of the clone it may not make or replace) rather than the remote. A file
// of the clone that is missing is not: that is damage.
func (s *Syncer) cloneWriteError(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EROFS) {
		return true
	}
	if !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.EIO) && !errors.Is(err, syscall.EFBIG) {
		return false
	}
	var paths []string
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		paths = append(paths, pe.Path)
	}
	if le, ok := errors.AsType[*os.LinkError](err); ok { // a pack renamed into place
		paths = append(paths, le.Old, le.New)
	}
	dir, derr := filepath.Abs(s.cfg.Dir) // go-git names its files absolute
	if derr != nil {
		return false
	}
	for _, p := range paths {
		path, perr := filepath.Abs(p)
		if perr != nil {
			continue
		}
		if rel, rerr := filepath.Rel(dir, path); rerr == nil && filepath.IsLocal(rel) {
			return true
		}
	}
	return false
}

// fetchError is a fetch from the remote that failed: the repo unreachable
// or silent, its branch missing, the credentials refused. The loop logs it
// as sync_unreachable, and any other failed round (the registry or the
// clone unwritable, the sync lock) as sync_error. Its message is one line
// (oneLine): go-git puts in its errors what the remote sent, an ssh
// server's first line of errors or the text of an "ERR" packet, as sent.
type fetchError struct {
	err error
	msg string
}

func newFetchError(err error) *fetchError {
	return &fetchError{err: err, msg: oneLine(err.Error())}
}

func (e *fetchError) Error() string { return e.msg }
func (e *fetchError) Unwrap() error { return e.err }

// cloneDamage is an object the clone should hold and cannot read: a pack
// lost or torn by a crash or a power cut while go-git wrote it.
type cloneDamage struct{ err error }

func (d *cloneDamage) Error() string { return d.err.Error() }
func (d *cloneDamage) Unwrap() error { return d.err }

// compile reads the flows folder and access.yaml of a commit from git
// objects and compiles them; problems refuse the commit. An object that
// cannot be read is not a problem of the commit but damage to the clone:
// it is returned as damage, and the commit is judged again once the clone
// is whole.
func (s *Syncer) compile(repo *git.Repository, commit *object.Commit) (flows []*flow.Flow, keys *access.Set, problems []string, damage error) {
	root, err := boundedTree(repo, commit.TreeHash, maxOuterTreeBytes)
	if ts, ok := errors.AsType[*treeSize](err); ok {
		return nil, nil, []string{fmt.Sprintf("the repo's root folder holds more entries than git sync reads (%v)", ts)}, nil
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading the tree of %s: %w", commit.Hash, err)
	}
	w := &walker{
		maxFileBytes: s.cfg.MaxFileBytes, maxFiles: s.cfg.MaxFiles, maxTotalBytes: s.cfg.MaxTotalBytes,
		root: s.cfg.FlowsDir, label: s.cfg.FlowsDir,
		join: func(dir, name string) string { return dir + "/" + name },
	}
	w.fail = w.readFailed
	var accessEntry entry
	if e, err := root.FindEntry("access.yaml"); err == nil {
		accessEntry = gitEntry{repo, e}
	}
	accessData := w.file(accessEntry, "access.yaml")
	accessRefused := len(w.problems) > 0 // read, it would be refused again as missing
	// found by its entry, not with Tree (which reports a tree object the
	// clone lost as a folder the commit lacks)
	e, notFolder, err := findEntry(repo, root, s.cfg.FlowsDir)
	whose := "the flows folder, --flows-dir"
	if notFolder != s.cfg.FlowsDir {
		// a folder on its path that is a file or a link in the commit
		// (go-git's FindEntry looked a tree up under a blob's hash and
		// failed as if the clone lacked it: it was cloned anew at every
		// round)
		whose = "on the path of the flows folder " + s.cfg.FlowsDir + ", --flows-dir"
	}
	switch {
	case errors.As(err, new(*treeSize)):
		w.problem("%s/: holds more entries than git sync reads on the path of the flows folder (%v)", notFolder, err)
	case err == nil && e.Mode != filemode.Dir:
		what := "a file"
		switch e.Mode {
		case filemode.Symlink:
			what = "a symbolic link"
		case filemode.Submodule:
			what = "a submodule"
		}
		w.problem("%s: is %s in the commit, not a folder (%s)", notFolder, what, whose)
	case errors.Is(err, object.ErrDirectoryNotFound), errors.Is(err, object.ErrEntryNotFound):
		// refused, not taken for "no flows": a moved folder or a mistyped
		// --flows-dir would withdraw every flow
		w.problem("%s/: the commit has no such folder (the flows folder, --flows-dir; to withdraw every flow, keep the folder with a file that is not a flow, such as %s/.gitkeep)", s.cfg.FlowsDir, s.cfg.FlowsDir)
	case err != nil:
		w.readFailed(s.cfg.FlowsDir+"/", err)
	default:
		w.walkFolder(gitEntry{repo, e}, s.cfg.FlowsDir)
	}
	if w.damage != nil {
		return nil, nil, nil, w.damage
	}
	// a commit the walk refused (a link, a file over a limit) is refused,
	// but its access.yaml and its flows are still checked, so that one
	// push says every error, as nexus validate does on the same files
	problems = w.problems
	if !accessRefused {
		keys, err = access.Parse("access.yaml", accessData)
		problems = append(problems, AccessProblems(err)...)
	}
	flows, errs := s.compiled.CompileSet(w.sources)
	for _, e := range errs {
		problems = append(problems, e.Error())
	}
	problems = append(problems, s.lostFlows(w.sources, flows, errs)...)
	if len(w.problems) > 0 {
		return nil, nil, problems, nil
	}
	for _, src := range w.sources {
		// skipped as other Markdown is, as the spec has it, but said: a
		// typo in the key that makes a file a flow file left a new flow
		// undeployed without a word (a live one's is refused: lostFlows)
		if why := flow.SkippedAsNotFlow(src.Data); why != "" {
			s.cfg.Logger.Warn("a Markdown file that looks meant for a flow is not a flow file, and was skipped", "event", "sync_file_skipped",
				"commit", commit.Hash.String(), "file", src.Path, "reason", why)
		}
	}
	return flows, keys, problems, nil
}

// maxOuterTreeBytes bounds the trees read outside the flows folder: the
// repo's root, and each folder on the path of the flows folder. Their
// entries are not counted, and a tree is decoded whole (about 500 bytes an
// entry): a root of 400,000 entries would take 200 MB at every process's
// first round. 1 MiB holds 3,700 entries of the longest names, some 25,000
// of usual ones.
const maxOuterTreeBytes = 1 << 20

// findEntry returns the entry of dir (a slash path in root) and its path,
// or the first entry on its way that is not a folder and its path. Each
// tree on the way is read within maxOuterTreeBytes (a *treeSize error
// names its path).
func findEntry(repo *git.Repository, root *object.Tree, dir string) (*object.TreeEntry, string, error) {
	parts := strings.Split(dir, "/")
	t := root
	for i, name := range parts {
		path := strings.Join(parts[:i+1], "/")
		e, err := t.FindEntry(name)
		if err != nil || i == len(parts)-1 || e.Mode != filemode.Dir {
			return e, path, err
		}
		if t, err = boundedTree(repo, e.Hash, maxOuterTreeBytes); err != nil {
			return nil, path, err
		}
	}
	return nil, dir, object.ErrEntryNotFound // dir is not empty
}

// AccessProblems is an error of access.Parse as a commit's problems, one
// line each (nil for nil).
func AccessProblems(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

// lostFlows refuses the silent withdrawal of a live flow whose file is
// still there but no longer reads as a flow file: a line above its front
// matter or a misspelt flowmarkdown_version makes it other Markdown, which
// the compiler skips, and the commit would withdraw the flow. Deleting or
// moving the file withdraws a flow; breaking it does not.
func (s *Syncer) lostFlows(sources []flow.Source, flows []*flow.Flow, errs flow.ErrorList) []string {
	live := s.cfg.Registry.Live()
	if live == nil {
		return nil
	}
	present := make(map[string]bool, len(sources))
	for _, src := range sources {
		present[src.Path] = true
	}
	for _, e := range errs {
		delete(present, e.File) // refused already, for its own errors
	}
	for _, f := range flows {
		delete(present, f.Path()) // a flow file still: renamed in place, perhaps
	}
	kept := make(map[[2]string]bool, len(flows))
	for _, f := range flows {
		kept[[2]string{f.Tenant(), f.Name()}] = true
	}
	why := make(map[string]string, len(present))
	for _, src := range sources {
		if present[src.Path] {
			why[src.Path] = flow.SkippedAsNotFlow(src.Data)
		}
	}
	var out []string
	for _, lf := range live.Flows() {
		if present[lf.SourcePath] && !kept[[2]string{lf.Tenant, lf.Name}] {
			reason := why[lf.SourcePath] // an LFS pointer, a misspelt key
			if reason == "" {
				reason = "its front matter does not open the file or lacks flowmarkdown_version"
			}
			out = append(out, fmt.Sprintf("%s: no longer a flow file (%s), "+
				"but it holds the live flow %s/%s: fix the file, or delete or move it to withdraw the flow", lf.SourcePath, reason, lf.Tenant, lf.Name))
		}
	}
	return out
}

// removeEmptyRefs removes the empty files under the clone's refs/ and
// returns their names.
func (s *Syncer) removeEmptyRefs() ([]string, error) {
	var removed []string
	root := filepath.Join(s.cfg.Dir, "refs")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if info, err := d.Info(); err != nil || info.Size() > 0 {
			return err
		}
		rel, _ := filepath.Rel(s.cfg.Dir, p)
		removed = append(removed, filepath.ToSlash(rel))
		return os.Remove(p)
	})
	return removed, err
}

// Trigger asks the running loop to sync now (the webhook). It never blocks.
func (s *Syncer) Trigger() {
	select {
	case s.trigger <- struct{}{}:
	default: // a sync is already pending
	}
}

// Start syncs in the background, at once and then every Poll (or on
// Trigger), and returns at once. An unreachable repo is retried with
// capped exponential backoff and jitter; it is logged, never fatal. After
// Stop it takes a new server's lock first (New took the first), as the
// server a later start makes, so that the servers it supersedes stay
// superseded; when that lock cannot be made, it logs sync_error and does
// not start.
func (s *Syncer) Start() {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.server == nil {
		s.mu.Lock() // a Sync in progress reads the name
		err := s.lockServer()
		s.mu.Unlock()
		if err != nil {
			s.cfg.Logger.Error("the sync could not start again: its server's lock could not be made", "event", "sync_error",
				"repo", s.remoteURL(), "error", err.Error())
			return
		}
	}
	s.life.Start(s.loop)
}

// Stop ends the loop, waiting for a sync in progress, and lets the
// server's lock go (a server it superseded publishes again). It is safe
// to call more than once, and without Start. A Sync after it is refused
// (errStopped) until Start.
func (s *Syncer) Stop() {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	s.life.Stop()
	s.mu.Lock() // a Sync called meanwhile reads the lock
	defer s.mu.Unlock()
	if s.server != nil {
		os.Remove(filepath.Join(s.serversDir(), s.serverName))
		s.server.Close() // which lets the lock go
		s.server = nil
	}
}

// errStopped is the error of a Sync after Stop: without its server's lock,
// what it published would not supersede the servers it should.
var errStopped = errors.New("gitsync: the Syncer is stopped (Start it again to sync)")

// minTriggerGap is the least time between the starts of two syncs when a
// Trigger asks for one sooner: a flood of webhooks (POST /hooks/git needs
// no key without --secret) fetches at most once a gap.
const minTriggerGap = time.Second

func (s *Syncer) loop(ctx context.Context) {
	failures, superseded := 0, false
	for {
		started := time.Now()
		res, err := s.Sync(ctx)
		if s.cfg.Observe != nil && ctx.Err() == nil {
			s.cfg.Observe(res, err)
		}
		wait := s.cfg.Poll
		var se *SupersededError
		wasSuperseded := superseded
		if res.Skipped != SkippedLocked {
			// a round another process ran says nothing of this one
			superseded = errors.As(err, &se)
		}
		switch {
		case se != nil:
			// the state of things, not a failure to retry sooner or
			// later: said once, and looked at again every poll
			failures = 0
			if !wasSuperseded {
				s.cfg.Logger.Error("another server publishes another source into this state directory: this one has stopped publishing",
					"event", "sync_superseded", "source", se.Own, "other_source", se.Source,
					"other_started", se.Started.UTC().Format(time.RFC3339Nano))
			}
		case err != nil && ctx.Err() == nil:
			failures++
			wait = Backoff(s.cfg.Poll, s.cfg.MaxBackoff, failures, rand.Float64())
			msg, event := "the config repo could not be fetched; retrying", "sync_unreachable"
			if fe := (*fetchError)(nil); !errors.As(err, &fe) {
				msg, event = "a sync could not be done here (the registry or the clone); retrying", "sync_error"
			}
			s.cfg.Logger.Warn(msg, "event", event,
				"repo", s.remoteURL(), "attempt", failures, "retry_in", wait.Round(time.Millisecond).String(), "error", err.Error())
		default:
			failures = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-s.trigger:
			t.Stop()
			if gap := time.Until(started.Add(minTriggerGap)); gap > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(gap):
				}
			}
		}
	}
}

// Backoff is the wait after the n-th consecutive failure (n ≥ 1):
// base·2^(n-1) capped at max, scaled by a jitter factor in [0.5, 1.5)
// from r in [0, 1).
func Backoff(base, max time.Duration, n int, r float64) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return time.Duration(float64(d) * (0.5 + r))
}
