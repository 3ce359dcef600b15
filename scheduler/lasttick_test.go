package scheduler

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestSaveLastTick: the record is written whole, replaces an older one or a
// temporary file a crash left, reads back as the time saved, and leaves no
// temporary file; in a folder that does not exist it fails and makes
// nothing. (That it is fsynced cannot be seen without a power cut.)
func TestSaveLastTick(t *testing.T) {
	t0 := time.Date(2026, 8, 9, 14, 3, 0, 0, time.UTC)
	cases := []struct {
		name    string
		files   map[string]string // in {dir}/acme before the save
		noDir   bool              // {dir}/acme does not exist
		wantErr bool
		want    map[string]string // in {dir}/acme after
	}{{
		name: "first record",
		want: map[string]string{"nightly.last": "1786284180000000000\n"},
	}, {
		name:  "replaces the previous record",
		files: map[string]string{"nightly.last": "1786284120000000000\n"},
		want:  map[string]string{"nightly.last": "1786284180000000000\n"},
	}, {
		name:  "over a temporary file left by a crash",
		files: map[string]string{"nightly.last": "1786284120000000000\n", "nightly.last.tmp": "17862841"},
		want:  map[string]string{"nightly.last": "1786284180000000000\n"},
	}, {
		name:    "no folder",
		noDir:   true,
		wantErr: true,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			folder := filepath.Join(dir, "acme")
			if !c.noDir {
				if err := os.Mkdir(folder, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for name, content := range c.files {
				if err := os.WriteFile(filepath.Join(folder, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s := New(Config{Dir: dir})
			e := &entry{tenant: "acme", flow: "nightly"}
			err := s.saveLastTick(e, t0)
			if (err != nil) != c.wantErr {
				t.Fatalf("saveLastTick: %v, want an error: %v", err, c.wantErr)
			}
			got := map[string]string{}
			ents, _ := os.ReadDir(folder)
			for _, de := range ents {
				b, err := os.ReadFile(filepath.Join(folder, de.Name()))
				if err != nil {
					t.Fatal(err)
				}
				got[de.Name()] = string(b)
			}
			if diff := cmp.Diff(c.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("files after the save (-want +got):\n%s", diff)
			}
			if !c.wantErr {
				if last, err := s.lastTick(e); err != nil || !last.Equal(t0) {
					t.Errorf("lastTick = %v, %v; want %v", last, err, t0)
				}
			}
		})
	}
}
