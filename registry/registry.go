package registry

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"modernc.org/sqlite" // the pure-Go SQLite driver: the binary needs no cgo
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/nexushq/nexus/flow"
)

// Registry is an open registry.db. Several processes and the CLI may open
// the same file at once: SQLite's WAL mode and busy timeouts serialise their
// writes, and every write is one transaction.
type Registry struct {
	db   *sql.DB
	path string
	now  func() time.Time
	log  *slog.Logger // nil: nothing logged
	// corruptLogged holds the versions artifact_corrupt was logged for,
	// so that racing or failed builds do not log one twice; accessLogged
	// the SHA-256 of the stored access keys access_unreadable was last
	// logged for
	corruptMu     sync.Mutex
	corruptLogged map[corruptKey]bool
	accessLogged  [sha256.Size]byte
	live          atomic.Pointer[LiveSet]
	// published is the generation this handle's last publication made
	// (0 before one): the watcher leaves it to the publisher to report
	published atomic.Int64

	compiledMu sync.Mutex
	compiled   map[string]*flow.Flow // by artifact SHA-256: published here, not yet loaded

	// file is the registry file as Open found it once open, at abs (the
	// path made absolute), which Replaced compares with what the path
	// names; nil when it could not be read
	file os.FileInfo
	abs  string
}

// Options tune Open. Zero fields take the defaults.
type Options struct {
	// Now is the registry's clock; nil means time.Now.
	Now func() time.Time
	// ReadOnly opens an existing registry to read it only (nexus status,
	// nexus journal): no table is created, migrated or written, and no
	// write lock is taken, so a reader never waits for a server's writes
	// (SQLite may still make the -wal and -shm files a reader of a WAL
	// database needs). A registry of another schema version is refused.
	ReadOnly bool
	// Logger, when set, is told of each stored flow version whose
	// artifact fails its integrity check as a live set is loaded
	// (artifact_corrupt), once per version, and of a registry whose
	// generation went back below the live set's as Refresh found it
	// (registry_generation_went_back); nil logs nothing (the commands
	// that print the live set say it themselves).
	Logger *slog.Logger
}

// BusyTimeout is how long a statement waits for another process's write
// transaction before it fails.
const BusyTimeout = 10 * time.Second

// WALSizeLimit is the size in bytes the registry's -wal file is cut back to
// when SQLite starts it over after a checkpoint (journal_size_limit). The
// file holds about 4 MiB between checkpoints (SQLite checkpoints at 1,000
// pages) but grows past that while a reader keeps an old snapshot (a long
// nexus journal, a backup) during a burst of writes; without a limit it
// then stays at its peak for as long as the database is in use.
const WALSizeLimit = 4 << 20

// Open opens (creating it and its folder if needed) the registry at path and
// runs the schema migrations it has not seen yet.
func Open(ctx context.Context, path string, opts Options) (*Registry, error) {
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		return nil, fmt.Errorf("registry %s is a directory: give the registry file, such as %s", path, filepath.Join(path, "registry.db"))
	}
	// the state directory and the registry are the owner's alone (0700,
	// 0600: queue.DirMode and queue.FileMode, which this package does not
	// import); SQLite gives its -wal and -shm files the database's mode
	if !opts.ReadOnly {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("registry %s: %w", path, err)
		}
		if err := syscall.Access(filepath.Dir(path), 2 /* W_OK */); errors.Is(err, syscall.EROFS) {
			// said, rather than SQLite's "unable to open database file"
			return nil, fmt.Errorf("registry %s: the file system is read-only: nexus serve and nexus deploy write the registry (nexus status and nexus journal only read it)", path)
		}
	}
	// no symbolic link where the registry or its side files should be:
	// SQLite would write through it, wherever it points; nor a device, a
	// folder or a pipe (--db /dev/null: SQLite's "disk I/O error", and a
	// pipe would block the first read)
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		info, err := os.Lstat(p)
		switch {
		case err != nil:
		case info.Mode()&os.ModeSymlink != 0:
			return nil, fmt.Errorf("registry %s: %s is a symbolic link: the registry and its -wal and -shm files are regular files of the state directory", path, filepath.Base(p))
		case p == path && !info.Mode().IsRegular():
			return nil, notRegular(path)
		case !info.Mode().IsRegular():
			return nil, fmt.Errorf("registry %s: %s is not a regular file: the registry and its -wal and -shm files are regular files of the state directory", path, filepath.Base(p))
		}
	}
	// -wal and -shm files another user left (a server once run as root,
	// killed): SQLite says only "unable to open database file (14)"
	need, verb := uint32(4 /* R_OK */), "read"
	if !opts.ReadOnly {
		need, verb = 4|2 /* W_OK */, "read and written"
	}
	for _, side := range []string{"-wal", "-shm"} {
		if err := syscall.Access(path+side, need); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.EROFS) {
			return nil, fmt.Errorf("registry %s: %s cannot be %s by this user (%v): the registry's -wal and -shm files belong to the registry's owner", path, filepath.Base(path+side), verb, err)
		}
	}
	if opts.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("registry %s: %w", path, err)
		}
	} else if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600); err == nil {
		f.Close()
	} else if pe, ok := errors.AsType[*fs.PathError](err); ok {
		// said here, rather than as SQLite's "unable to open database file"
		return nil, fmt.Errorf("registry %s cannot be opened for writing: %w", path, pe.Err)
	}
	if err := CheckSQLite(path); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", path, err)
	}
	if info, err := os.Stat(path); err == nil && info.Size() > 0 && !opts.ReadOnly {
		// another program's database (a mistyped --db) is refused before
		// anything is written to it, as the read-only open refuses it
		if err := checkNotForeign(ctx, abs); err != nil {
			return nil, openError(path, err)
		}
	}
	db, err := sql.Open("sqlite", dataSource(abs, opts.ReadOnly))
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	r := &Registry{db: db, path: path, abs: abs, now: opts.Now, log: opts.Logger}
	if r.now == nil {
		r.now = time.Now
	}
	if opts.ReadOnly {
		if err := r.checkSchema(ctx); err != nil {
			db.Close()
			return nil, openError(path, err)
		}
		r.file, _ = os.Stat(abs)
		return r, nil
	}
	// A new file's first connections race to switch it to WAL, which
	// SQLite answers with SQLITE_BUSY rather than waiting: retry that.
	deadline := time.Now().Add(BusyTimeout)
	for {
		err = r.migrate(ctx)
		if err == nil {
			r.file, _ = os.Stat(abs)
			return r, nil
		}
		if cerr := ctx.Err(); cerr != nil && isBusy(err) {
			// cancelled between two tries: the stop asked for (nexus
			// serve exits 0 on it), not the lock's error
			err = fmt.Errorf("waiting for another process's write: %w", cerr)
		}
		if !isBusy(err) || time.Now().After(deadline) || ctx.Err() != nil {
			db.Close()
			return nil, openError(path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dataSource is the driver's name for the registry file abs: a file: URI
// with the path escaped (so that '#' or '?' in a folder name cannot cut it
// short) and the connection's pragmas.
func dataSource(abs string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.Itoa(int(BusyTimeout.Milliseconds()))+")")
	if readOnly {
		// the file's journal mode as it is (switching it is a write), and
		// no statement may change the database
		q.Add("_pragma", "query_only(1)")
		if err := syscall.Access(filepath.Dir(abs), 2 /* W_OK */); err != nil {
			// a folder this process cannot write: SQLite cannot make the
			// -shm file a WAL database's reader needs, so the file is
			// opened read-only (which works while a server keeps its
			// -wal and -shm there); on a read-only file system (a
			// snapshot, a read-only mount), where nothing can change it,
			// and without a -wal file (nothing beyond the database file
			// itself), as immutable, which needs none
			q.Set("mode", "ro")
			if _, werr := os.Lstat(abs + "-wal"); errors.Is(err, syscall.EROFS) && errors.Is(werr, fs.ErrNotExist) {
				q.Set("immutable", "1")
			}
		}
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "journal_size_limit("+strconv.Itoa(WALSizeLimit)+")")
	}
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	return (&url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}).String()
}

// checkNotForeign refuses an SQLite database that holds tables but no
// registry schema: another program's, which migrating would change (the
// migrations and the schema version are written in one transaction, so a
// registry with tables always has a version). It only reads.
func checkNotForeign(ctx context.Context, abs string) error {
	db, err := sql.Open("sqlite", dataSource(abs, true))
	if err != nil {
		return err
	}
	defer db.Close()
	// one statement, so one read of the file: another process may be
	// making this registry now, and its tables and version come in one
	// transaction
	var version, tables int
	if err := db.QueryRowContext(ctx, `SELECT (SELECT user_version FROM pragma_user_version), (SELECT count(*) FROM sqlite_master)`).Scan(&version, &tables); err != nil {
		return err
	}
	if version == 0 && tables > 0 {
		return errors.New("not a registry (an SQLite database of another program: it holds tables, none of them nexus's); give a registry or a new file")
	}
	return nil
}

// sqliteHeader opens every SQLite database file.
const sqliteHeader = "SQLite format 3\x00"

// CheckSQLite refuses a file at path that is not an SQLite database (a
// mistyped --db naming some other file), before SQLite reads it ("file is
// not a database (26)") or anything is written to it. A file that does
// not exist or is empty passes: it becomes a registry. One that cannot
// be read is said (open PATH: permission denied).
func CheckSQLite(path string) error {
	if info, err := os.Stat(path); err == nil && !info.Mode().IsRegular() {
		return notRegular(path) // a pipe's open would block
	}
	f, err := os.Open(path) // a symbolic link is refused by Open, in its words
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err // unreadable: said as it is, not as SQLite's "unable to open database file"
	}
	defer f.Close()
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	if n == 0 || (err != nil && err != io.ErrUnexpectedEOF) || string(head[:n]) == sqliteHeader {
		return nil
	}
	return fmt.Errorf("%s is not a registry (not an SQLite database)", path)
}

// notRegular is the refusal of a --db that names a device (/dev/null), a
// folder or a pipe, in every command's words.
func notRegular(path string) error {
	return fmt.Errorf("%s is not a registry (not a regular file)", path)
}

// openError is the error of a registry's first statement: SQLite's own
// text, but for a folder this user may not write (SQLite's
// SQLITE_READONLY_DIRECTORY, "attempt to write a readonly database
// (1544)"), which says which folder and why it matters, and for a full
// disk, which it says is full.
func openError(path string, err error) error {
	if _, named := errors.AsType[*lockedError](err); named {
		return err // it names the registry already
	}
	if _, named := errors.AsType[*fileError](err); named {
		return err
	}
	if isBusy(err) {
		// a read-only open's first read, of a registry another process
		// holds locked for itself (exclusive locking mode, in which a
		// WAL database's readers wait too): said as a refused write is
		return &lockedError{path: path, err: err}
	}
	se, ok := errors.AsType[*sqlite.Error](err)
	if ok && se.Code() == sqlite3.SQLITE_READONLY_DIRECTORY {
		return fmt.Errorf("registry %s: its folder %s is not writable by this user: SQLite makes the registry's -wal and -shm files beside it", path, filepath.Dir(path))
	}
	if full := diskFull(path, err); full != nil {
		return full
	}
	return fmt.Errorf("registry %s: %w", path, err)
}

// diskFull is err, an SQLite I/O error or SQLITE_FULL of the registry at
// path, said as the full disk it is, naming the registry and its folder;
// nil when err is not such an error or the disk has room. SQLite says
// "database or disk is full (13)", naming no file, when a write finds no
// room, and "disk I/O error (4874)" when the -shm file cannot grow, which
// reads as a failing disk.
func diskFull(path string, err error) error {
	se, ok := errors.AsType[*sqlite.Error](err)
	if !ok || (se.Code()&0xff != sqlite3.SQLITE_IOERR && se.Code()&0xff != sqlite3.SQLITE_FULL) {
		return nil
	}
	if _, said := errors.AsType[*diskFullError](err); said {
		return err
	}
	var st syscall.Statfs_t
	if syscall.Statfs(filepath.Dir(path), &st) != nil || st.Bavail*uint64(st.Bsize) >= fullDiskBytes {
		return nil
	}
	return &diskFullError{path: path, free: st.Bavail * uint64(st.Bsize), err: err}
}

// diskFullError is a registry write or open refused for want of room.
type diskFullError struct {
	path string
	free uint64 // bytes free on the disk when the write failed
	err  error
}

func (e *diskFullError) Error() string {
	return fmt.Sprintf("registry %s: the disk holding %s is full (%d bytes free): SQLite could not write the registry or its -wal and -shm files (%v)",
		e.path, filepath.Dir(e.path), e.free, e.err)
}

func (e *diskFullError) Unwrap() error { return e.err }

// fullDiskBytes is the free space under which openError takes an SQLite
// I/O error for a full disk: less than SQLite needs to grow its -shm file
// (32 KiB) and a few pages of its -wal.
const fullDiskBytes = 256 << 10

// isBusy reports whether err is SQLite's "database is locked".
func isBusy(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "SQLITE_BUSY") || strings.Contains(err.Error(), "database is locked"))
}

// Replaced says, as an error naming the registry, when its path no longer
// names the file this handle opened: another file renamed over it (a
// backup put back with cp and mv, a restore tool's rename) or the file
// deleted. The handle goes on reading and writing the file it opened,
// which no other process opening the path sees and which is gone once
// this one closes it: what it writes from then on is lost. (A connection
// the pool opens later opens the other file, beside the first one's -wal
// and -shm files.) nil when the
// path still names the file, or when it cannot tell.
func (r *Registry) Replaced() error {
	if r.file == nil {
		return nil
	}
	info, err := os.Stat(r.abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("registry %s was deleted under this process, whose open connections still read and write the deleted file: what they write is lost when it stops; restart it (to restore a registry under a running server, use sqlite3's .restore)", r.path)
	case err != nil || os.SameFile(info, r.file):
		return nil
	}
	return fmt.Errorf("registry %s was replaced by another file under this process, whose open connections still read and write the file it opened while a new one opens the other beside the first's -wal and -shm files: what they write may be lost or damage the new file; restart it now (to restore a registry under a running server, use sqlite3's .restore)", r.path)
}

// Path is the registry file's path.
func (r *Registry) Path() string { return r.path }

// Close closes the database.
func (r *Registry) Close() error { return r.db.Close() }

// migrations are the schema, one step per version; a step never changes
// once released: later changes are new steps.
var migrations = []string{
	// 1: flows, latest pointers, state, dedup, journal
	`CREATE TABLE flow_versions (
		tenant       TEXT    NOT NULL,
		flow         TEXT    NOT NULL,
		version      INTEGER NOT NULL,
		artifact     BLOB    NOT NULL,
		sha256       TEXT    NOT NULL,
		source_path  TEXT    NOT NULL,
		commit_id    TEXT    NOT NULL,
		published_at INTEGER NOT NULL,
		PRIMARY KEY (tenant, flow, version)
	);
	CREATE TABLE latest (
		tenant  TEXT    NOT NULL,
		flow    TEXT    NOT NULL,
		version INTEGER NOT NULL,
		PRIMARY KEY (tenant, flow),
		FOREIGN KEY (tenant, flow, version) REFERENCES flow_versions (tenant, flow, version)
	);
	CREATE TABLE state (
		key   TEXT PRIMARY KEY,
		value BLOB NOT NULL
	);
	INSERT INTO state (key, value) VALUES ('generation', 0);
	CREATE TABLE dedup (
		tenant  TEXT    NOT NULL,
		flow    TEXT    NOT NULL,
		key     TEXT    NOT NULL,
		claimed INTEGER NOT NULL,
		answer  BLOB,
		failed  INTEGER NOT NULL DEFAULT 0,
		expires INTEGER NOT NULL,
		PRIMARY KEY (tenant, flow, key)
	);
	CREATE INDEX dedup_expires ON dedup (expires);
	CREATE TABLE journal (
		id             INTEGER PRIMARY KEY,
		at             INTEGER NOT NULL,
		door           TEXT    NOT NULL,
		tenant         TEXT    NOT NULL,
		flow           TEXT    NOT NULL,
		version        INTEGER NOT NULL,
		correlation_id TEXT    NOT NULL,
		msg_id         INTEGER NOT NULL,
		attempt        INTEGER NOT NULL,
		outcome        TEXT    NOT NULL,
		status         INTEGER NOT NULL,
		duration_us    INTEGER NOT NULL,
		error          TEXT    NOT NULL
	);
	CREATE INDEX journal_at ON journal (at);
	CREATE INDEX journal_flow ON journal (tenant, flow, id);`,
	// 2: the journal listed newest first by time (an entry is written when
	// its execution ends, so ids are not in the order of the times)
	`DROP INDEX journal_flow;
	CREATE INDEX journal_flow_at ON journal (tenant, flow, at);`,
}

// SchemaError is a read-only Open's refusal of a registry whose schema
// version is not this nexus's: a registry still, which nexus serve or
// nexus deploy upgrades when it is older (a command that reads none of
// its tables may take it).
type SchemaError struct {
	Version int // the registry's
	Known   int // this nexus's
}

// Error says which version the registry has and what to do about it.
func (e *SchemaError) Error() string {
	if e.Version > e.Known {
		return fmt.Sprintf("schema version %d is newer than this nexus knows (%d): upgrade nexus", e.Version, e.Known)
	}
	return fmt.Sprintf("schema version %d is older than this nexus reads (%d): nexus serve or nexus deploy upgrades it", e.Version, e.Known)
}

// checkSchema refuses, for a read-only open, a registry whose schema is
// not this nexus's.
func (r *Registry) checkSchema(ctx context.Context) error {
	var v int
	if err := r.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	switch {
	case v == 0:
		return errors.New("not a registry (an SQLite database without nexus's tables)")
	case v != len(migrations):
		return &SchemaError{Version: v, Known: len(migrations)}
	}
	return nil
}

// migrate brings the schema to this nexus's version. A registry already
// there is only read: no write lock is taken.
func (r *Registry) migrate(ctx context.Context) error {
	var current int
	if err := r.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&current); err == nil && current == len(migrations) {
		return nil
	}
	return r.write(ctx, func(tx *sql.Tx) error {
		var v int
		if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
			return err
		}
		if v > len(migrations) {
			return fmt.Errorf("schema version %d is newer than this nexus knows (%d): upgrade nexus", v, len(migrations))
		}
		for i := v; i < len(migrations); i++ {
			if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
		}
		if v < len(migrations) {
			_, err := tx.ExecContext(ctx, `PRAGMA user_version = `+strconv.Itoa(len(migrations)))
			return err
		}
		return nil
	})
}

// write runs fn in one write transaction (BEGIN IMMEDIATE, so a busy
// database waits up to BusyTimeout instead of failing at commit).
// A write refused because the database stayed locked says so, naming the
// registry: SQLite's own text ("database is locked (5)") names neither;
// so does one refused for a full disk ("database or disk is full (13)").
func (r *Registry) write(ctx context.Context, fn func(*sql.Tx) error) error {
	err := r.writeTx(ctx, fn)
	if isBusy(err) {
		return &lockedError{path: r.path, err: err}
	}
	if full := diskFull(r.path, err); full != nil {
		return full
	}
	if se, ok := errors.AsType[*sqlite.Error](err); ok && fileFault(se.Code()) {
		// the damage Open reports as "registry PATH: database disk
		// image is malformed (11)", found by a write past the pages
		// Open reads
		return &fileError{path: r.path, err: err}
	}
	return err
}

// fileFault reports whether an SQLite result code is a fault of the
// registry's file (damaged, not a database, an I/O error) rather than of
// what a statement asked.
func fileFault(code int) bool {
	switch code & 0xff {
	case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_IOERR:
		return true
	}
	return false
}

// fileError is a write refused for a fault of the registry's file, which
// it names.
type fileError struct {
	path string
	err  error
}

func (e *fileError) Error() string { return fmt.Sprintf("registry %s: %v", e.path, e.err) }

func (e *fileError) Unwrap() error { return e.err }

// lockedError is a write refused because another process held the
// registry's write lock, or a read-only open refused because another
// process held the registry locked for itself (SQLite waits up to
// BusyTimeout first).
type lockedError struct {
	path string
	err  error
}

func (e *lockedError) Error() string {
	return fmt.Sprintf("registry %s: locked by another process's write (waited up to %v): %v", e.path, BusyTimeout, e.err)
}

func (e *lockedError) Unwrap() error { return e.err }

func (r *Registry) writeTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return withRollback(err, rollback(tx))
	}
	return tx.Commit()
}

// withRollback is a write's error err, naming rbErr, the rollback's, when
// it failed too: one line that is err (errors.Is and As see err; rbErr is
// told, not wrapped), for a sync_error, /status or a command's error line.
// errors.Join wrote them on two lines.
func withRollback(err, rbErr error) error {
	if rbErr == nil {
		return err
	}
	return fmt.Errorf("%w (and undoing the write failed: %v)", err, rbErr)
}

func rollback(tx *sql.Tx) error {
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return err
	}
	return nil
}

// Generation returns the generation counter: it moves by one with every
// publication that changes anything.
func (r *Registry) Generation(ctx context.Context) (int64, error) {
	return readGeneration(ctx, r.db)
}

func unixMilli(t time.Time) int64 { return t.UnixMilli() }
