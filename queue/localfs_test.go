package queue

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

// TestCheckLocal: a state directory on NFS or SMB/CIFS is refused with an
// error naming the folder and the file system; a local one (this test's
// temporary folder) and one statfs cannot describe are accepted.
func TestCheckLocal(t *testing.T) {
	if err := CheckLocal(t.TempDir()); err != nil {
		t.Errorf("a local temporary folder: %v", err)
	}
	for _, tc := range []struct {
		magic int64
		want  string
	}{
		{0x6969, "is on NFS, a network file system"},
		{0x517b, "is on SMB"},
		{0xff534d42, "is on CIFS"},
		{0xfe534d42, "is on SMB2"},
		{0xef53, ""},     // ext4
		{0x01021994, ""}, // tmpfs
	} {
		err := checkLocal("/srv/nexus", func(_ string, st *syscall.Statfs_t) error {
			st.Type = tc.magic
			return nil
		})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("magic %#x: %v, want accepted", tc.magic, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), "the state directory /srv/nexus "+tc.want)):
			t.Errorf("magic %#x: %v, want an error saying %q", tc.magic, err, tc.want)
		}
	}
	if err := checkLocal("/srv/nexus", func(string, *syscall.Statfs_t) error { return errors.New("no statfs") }); err != nil {
		t.Errorf("statfs failing: %v, want accepted", err)
	}
}
