package registry_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/registry"
)

// TestPublishIntoADamagedRegistry: a publication that finds a page of the
// registry damaged (its flow_versions table overwritten, which Open does
// not read) fails with an error naming the registry, as the same damage
// found by Open is said, and changes nothing. nexus deploy printed
// "nothing published: publishing acme/a: database disk image is malformed
// (11)", naming no file.
func TestPublishIntoADamagedRegistry(t *testing.T) {
	path := dbPath(t)
	r := open(t, path, registry.Options{})
	publish(t, r, registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "1"), compile(t, "acme", "b", "1")}, Commit: "c1"})
	r.Close()
	var root, size int64
	db := sideDB(t, path)
	if err := db.QueryRow(`SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_master WHERE name = 'flow_versions'`).Scan(&root, &size); err != nil {
		t.Fatal(err)
	}
	db.Close()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(strings.Repeat("\xa5", int(size))), (root-1)*size); err != nil {
		t.Fatal(err)
	}
	f.Close()

	r = open(t, path, registry.Options{})
	_, err = r.Publish(context.Background(), registry.Publication{Flows: []*flow.Flow{compile(t, "acme", "a", "2")}})
	if want := "registry " + path + ": "; err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("Publish into a damaged registry: %v; want an error beginning %q and saying it is malformed", err, want)
	}
	if g := generation(t, r); g != 1 {
		t.Errorf("generation %d after the refused publication, want 1", g)
	}
}
