package registry_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nexushq/nexus/registry"
)

// FuzzStateValues reads arbitrary values in the state table (what an
// older or later version, or a person, left there) as Status and Snapshot
// read them (the generation an integer, as every version writes it):
// neither fails nor panics; and a refused sync recorded by
// RecordSyncFailure, with arbitrary errors and source, reads back as
// recorded.
func FuzzStateValues(f *testing.F) {
	f.Add([]byte("0123abc"), []byte("2026-08-09T14:02:11Z"), int64(3), []byte("bad1"), []byte(`["flows/a.md:1: x"]`), []byte("2026-08-09T14:02:11.5Z"), "flows/a.md:1: x\x00flows/b.md:2: y", "repo main flows")
	f.Add([]byte(""), []byte("yesterday"), int64(-1), []byte(""), []byte(`{"a":1}`), []byte(""), "", "")
	f.Add([]byte("c"), []byte("2026-08-09T14:02:11"), int64(1<<62), []byte("c"), []byte(`["a",`), []byte("0"), "\xff\xfe", "\xff")
	path := dbPath(f)
	c := newClock()
	r, err := registry.Open(context.Background(), path, registry.Options{Now: c.Now})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { r.Close() })
	db := sideDB(f, path)
	f.Fuzz(func(t *testing.T, commit, syncedAt []byte, generation int64, failedCommit, failedErrors, failedAt []byte, errs, source string) {
		ctx := context.Background()
		for k, v := range map[string][]byte{
			"commit": commit, "synced_at": syncedAt,
			"failed_commit": failedCommit, "failed_errors": failedErrors, "failed_at": failedAt,
			"source": []byte(source), "source_started": syncedAt, "source_server": failedCommit,
		} {
			exec(t, db, `INSERT INTO state (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, k, v)
		}
		// the generation is an integer (SQLite's: value + 1 raises it)
		exec(t, db, `UPDATE state SET value = ? WHERE key = 'generation'`, generation)
		if _, err := r.Status(ctx); err != nil {
			t.Fatalf("Status: %v", err)
		}
		if _, _, err := r.Snapshot(ctx); err != nil {
			t.Fatalf("Snapshot: %v", err)
		}

		list := strings.Split(errs, "\x00")
		src := registry.SyncSource{Name: source, Started: time.Unix(0, int64(len(errs))*1e9+7).UTC(), Server: "s.lock"}
		if err := r.RecordSyncFailure(ctx, string(failedCommit), list, src); err != nil {
			t.Fatalf("RecordSyncFailure: %v", err)
		}
		st, err := r.Status(ctx)
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		want := &registry.SyncError{Commit: string(failedCommit), Errors: list, At: c.Now().UTC()}
		// JSON carries strings as UTF-8: a byte that is not is read as U+FFFD
		for i, e := range want.Errors {
			want.Errors[i] = string([]rune(e))
		}
		if diff := cmp.Diff(want, st.LastError, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("the refused sync reads back (-recorded +read):\n%s", diff)
		}
		if src.Name != "" && (st.Source.Name != src.Name || !st.Source.Started.Equal(src.Started) || st.Source.Server != src.Server) {
			t.Fatalf("the source %+v reads back as %+v", src, st.Source)
		}
	})
}
