package gitsync

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nexushq/nexus/jsonlog/jsonlogtest"
)

// packFiles lists the clone's pack files and its packs in the making
// (tmp_pack_*, tmp_obj_*), sorted.
func packFiles(t *testing.T, clone string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(clone, "objects", "pack"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

// TestPackingEndsWithTheRound: the packing of the clone at the end of a
// round stops when the round's context ends (Stop, at a shutdown), as the
// fetch does: a packing of the whole clone reads and writes every object
// of the history (seconds for a repo of some thousands of commits), and
// Stop waited for it, past the shutdown's grace. A round that ended does
// not start one, and one under way stops, leaving the clone's packs as
// they were and no part of a new one; neither is a failed packing (no
// warning, and the next round packs as it would have).
func TestPackingEndsWithTheRound(t *testing.T) {
	for _, c := range []struct {
		name  string
		whole bool
	}{
		{"the small packs rolled up", false},
		{"the whole clone", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, clone := newSourceAndClone(t)
			if c.whole {
				churn(t, src, clone, 3, MaxPacks+1) // packs alike: the whole clone
			} else {
				// a large file outside the flows folder: one large pack,
				// and the fetches since
				big := make([]byte, 1<<20)
				rand.Read(big)
				if err := os.WriteFile(filepath.Join(src, "vendored.bin"), big, 0o644); err != nil {
					t.Fatal(err)
				}
				churn(t, src, clone, 3, 1)
				packAll(t, clone, nil)
				churn(t, src, clone, 100, MaxPacks)
			}
			before := packFiles(t, clone)

			repo, err := openClone(clone)
			if err != nil {
				t.Fatal(err)
			}
			defer repo.Storer.(interface{ Close() error }).Close()
			// under way when the round ends: the new pack half written
			_, whole, err := rollUpOrRepack(endsWhileWriting{context.Background(), clone}, repo)
			if whole != c.whole {
				t.Fatalf("whole = %v, want %v", whole, c.whole)
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("rollUpOrRepack with the round ended: %v, want context.Canceled", err)
			}
			if after := packFiles(t, clone); !slices.Equal(after, before) {
				t.Errorf("the clone's packs after a packing the round's end stopped:\n%q\nwant them as they were:\n%q", after, before)
			}

			// after the round's end: not started, not a failure
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var logs jsonlogtest.Buffer
			s := &Syncer{cfg: Config{Logger: logs.Logger(slog.LevelDebug)}}
			s.packClone(ctx, repo)
			if got := logs.String(); got != "" {
				t.Errorf("packClone after the round's end logged %q, want nothing", got)
			}
			if s.repackFailedAt != 0 {
				t.Errorf("repackFailedAt = %d, want 0 (not a failed packing)", s.repackFailedAt)
			}
			if after := packFiles(t, clone); !slices.Equal(after, before) {
				t.Errorf("the clone's packs after packClone of an ended round:\n%q\nwant them as they were:\n%q", after, before)
			}
			gitIn(t, clone, "fsck", "--no-dangling")
		})
	}
}

// endsWhileWriting is a context that ends once a new pack of the clone is
// being written (objects/pack/tmp_pack_* exists): a round stopped in the
// middle of its packing.
type endsWhileWriting struct {
	context.Context
	clone string
}

func (c endsWhileWriting) Err() error {
	if parts, _ := filepath.Glob(filepath.Join(c.clone, "objects", "pack", "tmp_pack_*")); len(parts) > 0 {
		return context.Canceled
	}
	return nil
}
