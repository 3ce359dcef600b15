package registry

import (
	"errors"
	"strings"
	"testing"
)

// TestLockedOpenNamesTheRegistryOnce: an Open whose migration is refused
// because another process held the write lock says the registry once:
// write's error names it, and openError named it again ("registry P:
// registry P: …").
func TestLockedOpenNamesTheRegistryOnce(t *testing.T) {
	const path = "/var/lib/nexus/registry.db"
	err := openError(path, &lockedError{path: path, err: errors.New("database is locked (5) (SQLITE_BUSY)")})
	if n := strings.Count(err.Error(), "registry "+path); n != 1 || !isBusy(err) {
		t.Errorf("openError of a locked write: %q names the registry %d times (want once), busy %v (want true)", err, n, isBusy(err))
	}
}
