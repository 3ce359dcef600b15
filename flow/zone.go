package flow

import (
	"archive/zip"
	"bytes"
	_ "embed"
	"errors"
	"io"
	"sync"
	"time"
)

// zoneinfoZip is Go's tz database (GOROOT/lib/time/zoneinfo.zip, the one
// time/tzdata embeds), the only one schedule_timezone is read from, so a
// flow compiles the same on every host: time.LoadLocation prefers
// $ZONEINFO and the host's /usr/share/zoneinfo to its embedded copy, so a
// zone (or a zone's rules) held by one host's files alone compiled there
// and not elsewhere. It is the copy of Go 1.26.8 (tz 2025c); refresh it
// with the toolchain, `cp "$(go env GOROOT)/lib/time/zoneinfo.zip" flow/`,
// and change CompilerVersion when its rules change.
//
//go:embed zoneinfo.zip
var zoneinfoZip []byte

// zoneFiles indexes the embedded database's files by zone name, once.
var zoneFiles = sync.OnceValues(func() (map[string]*zip.File, error) {
	r, err := zip.NewReader(bytes.NewReader(zoneinfoZip), int64(len(zoneinfoZip)))
	if err != nil {
		return nil, err
	}
	files := make(map[string]*zip.File, len(r.File))
	for _, f := range r.File {
		files[f.Name] = f
	}
	return files, nil
})

// errNoZone is loadZone's error for a name the database does not hold.
var errNoZone = errors.New("unknown time zone")

// loadZone loads the IANA zone name from the embedded database alone
// (which holds no "" and no Local).
func loadZone(name string) (*time.Location, error) {
	files, err := zoneFiles()
	if err != nil {
		return nil, err
	}
	f, ok := files[name]
	if !ok {
		return nil, errNoZone
	}
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	return time.LoadLocationFromTZData(name, data)
}
