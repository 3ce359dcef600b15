package queue

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// largeRecord is the size of the records these tests check: well over
// what a check of one may allocate (streamLimit).
const (
	largeRecord = 8 << 20
	streamLimit = 1 << 20
)

// TestDamageScansStreamLargeFrames: the search past a damaged frame (each
// candidate's CRC), the check of a whole last frame for a zeroed sector
// (tornWrite) and of a tail whose length is past the end (tornTail) read
// a large record through a fixed buffer, and report the damage as before:
// the same offsets, lengths, reasons and torn flags. Each read the whole
// record into memory just to check it: 8 MiB for a record of 8 MiB.
func TestDamageScansStreamLargeFrames(t *testing.T) {
	small := appendFrame(nil, appendRetrySet(nil, retryAt(3, 2, time.Hour)))
	big := appendFrame(nil, bytes.Repeat([]byte{kindRetryCopy, 'x'}, largeRecord/2))
	damagedSmall := bytes.Clone(small)
	damagedSmall[headerSize+20] ^= 0x20
	flipped := bytes.Clone(big)
	flipped[len(flipped)/2] ^= 0x20
	zeroed := bytes.Clone(big)
	clear(zeroed[4096 : 4096+2*sectorSize]) // a whole sector of the file
	// the length one past the end, the record all there: the length is
	// the damage; and one whose record did not all arrive: torn
	longer := bytes.Clone(big)
	binary.BigEndian.PutUint32(longer[4:8], uint32(len(big)-headerSize+1))
	cut := big[:len(big)-100]
	// a frame marker in a damaged record, with a length that is all in
	// the file: the search checks its CRC, over megabytes, and goes on
	decoy := bytes.Clone(big)
	copy(decoy[headerSize+8:], frameMagic[:])
	binary.BigEndian.PutUint32(decoy[headerSize+12:], uint32(len(big)-3*headerSize))
	decoy[len(decoy)-1] ^= 0x20

	cat := func(frames ...[]byte) []byte { return bytes.Join(frames, nil) }
	s, b := int64(len(small)), int64(len(big))
	for _, tc := range []struct {
		name   string
		file   []byte
		want   []Damage
		wantAt int64 // where the scan ends
	}{{
		name:   "a damaged frame, then a large one",
		file:   cat(small, damagedSmall, big),
		want:   []Damage{{File: retryFile, Offset: s, Length: s, ID: 3, Reason: "a CRC that does not match"}},
		wantAt: 2*s + b,
	}, {
		name:   "a damaged large frame with a marker inside, then a frame",
		file:   cat(small, decoy, small),
		want:   []Damage{{File: retryFile, Offset: s, Length: b, ID: binary.BigEndian.Uint64(decoy[headerSize+1:]), Reason: "a CRC that does not match"}},
		wantAt: 2*s + b,
	}, {
		name:   "a large last frame with a flipped bit",
		file:   cat(small, flipped),
		want:   []Damage{{File: retryFile, Offset: s, Length: b, ID: binary.BigEndian.Uint64(big[headerSize+1:]), Reason: "a CRC that does not match"}},
		wantAt: s,
	}, {
		name:   "a large last frame with a zeroed sector",
		file:   cat(small, zeroed),
		want:   []Damage{{File: retryFile, Offset: s, Length: b, ID: binary.BigEndian.Uint64(big[headerSize+1:]), Torn: true, Reason: "a CRC that does not match"}},
		wantAt: s,
	}, {
		name: "a large last frame whose length is damaged",
		file: cat(small, longer),
		want: []Damage{{File: retryFile, Offset: s, Length: b, ID: binary.BigEndian.Uint64(big[headerSize+1:]),
			Reason: "a length of " + itoa(b-headerSize+1) + " bytes, past the end of the file"}},
		wantAt: s,
	}, {
		name: "a large last frame cut short",
		file: cat(small, cut),
		want: []Damage{{File: retryFile, Offset: s, Length: b - 100, ID: binary.BigEndian.Uint64(big[headerSize+1:]), Torn: true,
			Reason: "a length of " + itoa(b-headerSize) + " bytes, past the end of the file"}},
		wantAt: s,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), retryFile)
			if err := os.WriteFile(path, tc.file, 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var damage []Damage
			var end int64
			n := allocated(func() {
				end, err = scanHeads(f, retryFile, 0, int64(len(tc.file)), func([]byte, int64, int64) error { return nil },
					func(d Damage) { damage = append(damage, d) })
			})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, damage); diff != "" {
				t.Errorf("damage (-want +got):\n%s", diff)
			}
			if end != tc.wantAt {
				t.Errorf("the scan ended at %d, want %d", end, tc.wantAt)
			}
			wantStreamed(t, "the scan", "a record", n)
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestTornWriteReadInPartsAsWhole: tornWrite, reading a frame a part at a
// time, finds a zeroed sector where reading it whole does, wherever the
// frame begins and however long it is: a part ends at a sector boundary,
// so that no sector is checked in two halves.
func TestTornWriteReadInPartsAsWhole(t *testing.T) {
	whole := func(b []byte, off, n int64) bool {
		for start := off; start < off+n; {
			end := min((start/sectorSize+1)*sectorSize, off+n)
			if !bytes.ContainsFunc(b[start:end], func(r rune) bool { return r != 0 }) {
				return true
			}
			start = end
		}
		return false
	}
	file := bytes.Repeat([]byte{1}, 3*crcStreamed)
	for _, off := range []int64{0, 1, 300, sectorSize - 1, sectorSize, crcStreamed - 7} {
		for _, n := range []int64{1, 12, sectorSize - 1, sectorSize + 1, 3 * sectorSize, crcStreamed - 1, crcStreamed, crcStreamed + sectorSize + 5, 2 * crcStreamed} {
			for _, zero := range [][2]int64{{-1, -1}, {off, off + 1}, {off + n - 1, off + n}, {off + n/2 - sectorSize/2, off + n/2 + sectorSize/2}, {crcStreamed - 256, crcStreamed + 256}, {crcStreamed - sectorSize, crcStreamed}} {
				b := bytes.Clone(file)
				if zero[0] >= 0 {
					clear(b[max(zero[0], 0):min(zero[1], int64(len(b)))])
				}
				got, err := tornWrite(bytes.NewReader(b), off, n)
				if err != nil {
					t.Fatal(err)
				}
				if want := whole(b, off, n); got != want {
					t.Errorf("tornWrite at %d, %d bytes, zeros at %v: %v, want %v", off, n, zero, got, want)
				}
			}
		}
	}
}

// wantStreamed fails the test when what, reading a record of largeRecord
// bytes (a thing: "a dead letter"), allocated n bytes, more than
// streamLimit.
func wantStreamed(t *testing.T, what, thing string, n uint64) {
	t.Helper()
	if n > streamLimit {
		t.Errorf("%s allocated %d bytes (%.1f MiB) for %s of %d MiB, want at most %d", what, n, float64(n)/(1<<20), thing, largeRecord>>20, streamLimit)
	}
}
