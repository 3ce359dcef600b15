package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/flow"
)

// Publication is one change of the deployed set, applied in one
// transaction: all of it or none of it.
type Publication struct {
	// Flows are compiled flows to make latest; each one's Path is recorded
	// as its source path.
	Flows []*flow.Flow
	// Complete says Flows are the whole deployed set: a latest flow not among
	// them is withdrawn (a git commit). nexus deploy leaves other flows alone.
	Complete bool
	// Access replaces the access keys; nil leaves them as they are.
	Access *access.Set
	// Commit is the config repo commit published ("" for nexus deploy). A
	// publication with a commit records a successful sync and clears the
	// last failed one.
	Commit string
	// Source is the git sync's source, recorded with a Commit (when its
	// Name is set).
	Source SyncSource
}

// SyncSource is what a git sync follows and the server following it, as
// the registry records them with a publication or a refused commit: of
// two servers following different sources into one registry, the older
// one sees that it was superseded (gitsync).
type SyncSource struct {
	Name    string    // the repo (without credentials), branch and folder
	Started time.Time // when the server started
	Server  string    // the server's lock, which tells whether it still runs
}

// recordSource records src, when it is named.
func recordSource(ctx context.Context, tx *sql.Tx, src SyncSource) error {
	if src.Name == "" {
		return nil
	}
	for k, v := range map[string][]byte{
		"source": []byte(src.Name), "source_started": []byte(src.Started.UTC().Format(time.RFC3339Nano)), "source_server": []byte(src.Server),
	} {
		if err := setState(ctx, tx, k, v); err != nil {
			return err
		}
	}
	return nil
}

// Action is what a publication did to one flow.
type Action string

// The actions of a publication.
const (
	Published Action = "published"
	Unchanged Action = "unchanged"
	Withdrawn Action = "withdrawn"
)

// Change is what a publication did to one flow.
type Change struct {
	Tenant, Flow string
	Version      int
	Action       Action
}

func (c Change) String() string {
	return fmt.Sprintf("%s %s/%s v%d", c.Action, c.Tenant, c.Flow, c.Version)
}

// Publish applies p in one transaction. Each flow whose artifact differs
// from its latest version becomes a new version (versions count from 1 and
// are never reused); an identical one from the same file is unchanged (a
// moved file, or a stored artifact found corrupt, makes a new version). The generation counter
// moves by one when anything changed, and not otherwise. Changes are
// returned sorted by tenant and flow.
func (r *Registry) Publish(ctx context.Context, p Publication) ([]Change, error) {
	seen := map[[2]string]string{}
	for _, f := range p.Flows {
		k := [2]string{f.Tenant(), f.Name()}
		if first, dup := seen[k]; dup {
			return nil, fmt.Errorf("flow %s/%s is declared in both %s and %s", f.Tenant(), f.Name(), first, f.Path())
		}
		seen[k] = f.Path()
	}
	var changes []Change
	var sums []string // of p.Flows' artifacts
	var gen int64     // the generation made, 0 when nothing changed
	now := r.now()
	err := r.write(ctx, func(tx *sql.Tx) error {
		changes, sums = changes[:0], sums[:0]
		changed := false
		for _, f := range p.Flows {
			c, sum, err := publishFlow(ctx, tx, f, p.Commit, now)
			if err != nil {
				return fmt.Errorf("publishing %s/%s: %w", f.Tenant(), f.Name(), err)
			}
			changed = changed || c.Action == Published
			changes, sums = append(changes, c), append(sums, sum)
		}
		if p.Complete {
			withdrawn, err := withdrawOthers(ctx, tx, seen)
			if err != nil {
				return err
			}
			changed = changed || len(withdrawn) > 0
			changes = append(changes, withdrawn...)
		}
		if p.Access != nil {
			old, err := getState(ctx, tx, "access")
			if err != nil {
				return err
			}
			if !bytes.Equal(old, p.Access.Source()) {
				if err := setState(ctx, tx, "access", p.Access.Source()); err != nil {
					return err
				}
				changed = true
			}
		}
		if p.Commit != "" {
			old, err := getState(ctx, tx, "commit")
			if err != nil {
				return err
			}
			// the live set carries its commit: a new commit is a new set
			changed = changed || string(old) != p.Commit
			for k, v := range map[string][]byte{"commit": []byte(p.Commit), "synced_at": []byte(now.UTC().Format(time.RFC3339Nano))} {
				if err := setState(ctx, tx, k, v); err != nil {
					return err
				}
			}
			if err := recordSource(ctx, tx, p.Source); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM state WHERE key IN ('failed_commit', 'failed_errors', 'failed_at')`); err != nil {
				return err
			}
		}
		gen = 0
		if changed {
			// read first, as every read does: SQLite's value + 1 makes a
			// counter that is not an integer 1 (or 2.5), without a word,
			// and finds no row of a missing one
			if _, err := readGeneration(ctx, tx); err != nil {
				return err
			}
			if err := tx.QueryRowContext(ctx, `UPDATE state SET value = value + 1 WHERE key = 'generation' RETURNING value`).Scan(&gen); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if gen != 0 {
		r.published.Store(gen)
	}
	// the next live set takes the flows just published as they are
	// compiled, instead of compiling their artifacts again
	for i, c := range changes[:len(p.Flows)] {
		if c.Action == Published {
			r.handOver(p.Flows[i], sums[i])
		}
	}
	sort.Slice(changes, func(i, j int) bool {
		if changes[i].Tenant != changes[j].Tenant {
			return changes[i].Tenant < changes[j].Tenant
		}
		return changes[i].Flow < changes[j].Flow
	})
	return changes, nil
}

// publishFlow publishes f unless its latest version holds the same
// artifact; it also returns the artifact's SHA-256 (hex).
func publishFlow(ctx context.Context, tx *sql.Tx, f *flow.Flow, commit string, now time.Time) (Change, string, error) {
	art := f.Artifact()
	sum := flow.Sum(art)
	hexSum := hex.EncodeToString(sum[:])
	c := Change{Tenant: f.Tenant(), Flow: f.Name()}
	var latestVersion int
	var latestSum, latestPath string
	var latestArt []byte
	err := tx.QueryRowContext(ctx, `SELECT l.version, v.sha256, v.artifact, v.source_path FROM latest l
		JOIN flow_versions v ON v.tenant = l.tenant AND v.flow = l.flow AND v.version = l.version
		WHERE l.tenant = ? AND l.flow = ?`, c.Tenant, c.Flow).Scan(&latestVersion, &latestSum, &latestArt, &latestPath)
	stored := sha256.Sum256(latestArt)
	switch {
	// unchanged only when the stored bytes are still intact (publishing
	// the flow again repairs a corrupt artifact with a new version) and
	// the file has not moved (the version names its file, in the UI and
	// in errors)
	case err == nil && latestSum == hexSum && hex.EncodeToString(stored[:]) == hexSum && latestPath == f.Path():
		c.Version, c.Action = latestVersion, Unchanged
		return c, hexSum, nil
	case err != nil && !errors.Is(err, sql.ErrNoRows):
		return c, hexSum, err
	}
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) + 1 FROM flow_versions WHERE tenant = ? AND flow = ?`,
		c.Tenant, c.Flow).Scan(&c.Version); err != nil {
		return c, hexSum, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO flow_versions (tenant, flow, version, artifact, sha256, source_path, commit_id, published_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, c.Tenant, c.Flow, c.Version, art, hexSum, f.Path(), commit, unixMilli(now)); err != nil {
		return c, hexSum, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO latest (tenant, flow, version) VALUES (?, ?, ?)
		ON CONFLICT (tenant, flow) DO UPDATE SET version = excluded.version`, c.Tenant, c.Flow, c.Version); err != nil {
		return c, hexSum, err
	}
	c.Action = Published
	return c, hexSum, nil
}

func withdrawOthers(ctx context.Context, tx *sql.Tx, keep map[[2]string]string) ([]Change, error) {
	rows, err := tx.QueryContext(ctx, `SELECT tenant, flow, version FROM latest`)
	if err != nil {
		return nil, err
	}
	var out []Change
	for rows.Next() {
		var c Change
		if err := rows.Scan(&c.Tenant, &c.Flow, &c.Version); err != nil {
			rows.Close()
			return nil, err
		}
		if _, ok := keep[[2]string{c.Tenant, c.Flow}]; !ok {
			c.Action = Withdrawn
			out = append(out, c)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, c := range out {
		if _, err := tx.ExecContext(ctx, `DELETE FROM latest WHERE tenant = ? AND flow = ?`, c.Tenant, c.Flow); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func getState(ctx context.Context, q querier, key string) ([]byte, error) {
	var v []byte
	err := q.QueryRowContext(ctx, `SELECT value FROM state WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return v, err
}

// readGeneration reads the generation counter.
func readGeneration(ctx context.Context, q querier) (int64, error) {
	v, err := getState(ctx, q, "generation")
	if err != nil {
		return 0, err
	}
	return parseGeneration(v)
}

// parseGeneration reads the generation counter's value (nil: no row).
// Every version writes an integer; anything else (a damaged file, an edit
// by hand) is refused with one error, whichever read finds it.
func parseGeneration(v []byte) (int64, error) {
	if v == nil {
		return 0, errors.New("the generation counter in registry.db is missing: the file is damaged or was edited by hand")
	}
	g, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the generation counter in registry.db is not an integer (%q): the file is damaged or was edited by hand", v)
	}
	return g, nil
}

func setState(ctx context.Context, tx *sql.Tx, key string, value []byte) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO state (key, value) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
	return err
}

// RecordSyncFailure records a config repo commit of src that was refused,
// with every error (FILE:LINE: message). The deployed set does not change;
// src becomes the registry's source, as with a publication.
func (r *Registry) RecordSyncFailure(ctx context.Context, commit string, errs []string, src SyncSource) error {
	b, err := json.Marshal(errs)
	if err != nil {
		return err
	}
	return r.write(ctx, func(tx *sql.Tx) error {
		for k, v := range map[string][]byte{
			"failed_commit": []byte(commit),
			"failed_errors": b,
			"failed_at":     []byte(r.now().UTC().Format(time.RFC3339Nano)),
		} {
			if err := setState(ctx, tx, k, v); err != nil {
				return err
			}
		}
		return recordSource(ctx, tx, src)
	})
}

// ClearSyncFailure forgets the last refused commit (the branch no longer
// points at it).
func (r *Registry) ClearSyncFailure(ctx context.Context) error {
	return r.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM state WHERE key IN ('failed_commit', 'failed_errors', 'failed_at')`)
		return err
	})
}

// ConfirmSync records that a sync found the branch's head to be commit,
// the live one, now: synced_at is the time of the last successful sync,
// not of the last publication, so that a host polling a quiet repo does
// not look like one that cannot reach it. Nothing is written when commit
// is not the live one.
func (r *Registry) ConfirmSync(ctx context.Context, commit string) error {
	return r.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE state SET value = ? WHERE key = 'synced_at'
			AND (SELECT value FROM state WHERE key = 'commit') = ?`, []byte(r.now().UTC().Format(time.RFC3339Nano)), []byte(commit))
		return err
	})
}

// SyncError is a refused commit and its errors.
type SyncError struct {
	Commit string
	Errors []string
	At     time.Time
}

// Status is what is deployed, as nexus status and GET /status show it.
type Status struct {
	Commit     string    // the live commit ("" when nothing came from git)
	SyncedAt   time.Time // time of the last successful sync (zero if none)
	Flows      int       // number of latest flows
	Generation int64
	LastError  *SyncError // the last refused commit, nil after a good one
	// Source is that of the last publication or refused commit that
	// named one (zero before any).
	Source SyncSource
}

// Status reads the deployed state from the database.
func (r *Registry) Status(ctx context.Context) (Status, error) {
	tx, err := r.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Status{}, err
	}
	defer rollback(tx)
	return status(ctx, tx)
}

// Snapshot reads the status and builds the live set in one read
// transaction, so both are one state of the registry (nexus status: a
// publication between two reads printed its commit beside the sync
// failure it cleared). The set is not swapped in as Load's is.
func (r *Registry) Snapshot(ctx context.Context) (Status, *LiveSet, error) {
	tx, err := r.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Status{}, nil, err
	}
	defer rollback(tx)
	st, err := status(ctx, tx)
	if err != nil {
		return Status{}, nil, err
	}
	set, err := r.buildIn(ctx, tx, r.live.Load())
	if err != nil {
		return Status{}, nil, err
	}
	return st, set, nil
}

// status reads the registry's status in tx.
func status(ctx context.Context, tx *sql.Tx) (Status, error) {
	var st Status
	state := map[string][]byte{}
	rows, err := tx.QueryContext(ctx, `SELECT key, value FROM state`)
	if err != nil {
		return st, err
	}
	for rows.Next() {
		var k string
		var v []byte
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			return st, err
		}
		state[k] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, err
	}
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM latest`).Scan(&st.Flows); err != nil {
		return st, err
	}
	st.Commit = string(state["commit"])
	st.SyncedAt, _ = time.Parse(time.RFC3339Nano, string(state["synced_at"]))
	st.Source.Name = string(state["source"])
	st.Source.Started, _ = time.Parse(time.RFC3339Nano, string(state["source_started"]))
	st.Source.Server = string(state["source_server"])
	if st.Generation, err = parseGeneration(state["generation"]); err != nil {
		return st, err
	}
	if c, ok := state["failed_commit"]; ok {
		se := &SyncError{Commit: string(c)}
		_ = json.Unmarshal(state["failed_errors"], &se.Errors)
		se.At, _ = time.Parse(time.RFC3339Nano, string(state["failed_at"]))
		st.LastError = se
	}
	return st, nil
}
