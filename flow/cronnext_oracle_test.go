package flow

import (
	"math/rand"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/robfig/cron/v3"
)

// oracleNext is nextWall's reference: it walks Unix time forward from the
// first whole minute after t, reads loc's wall clock at each instant and
// stops at the first one whose wall clock s matches (minute, hour, day of
// month and day of week by robfig/cron's star rule, month; the seconds
// field of a five-field spec is 0). It steps a minute at a time, and over
// a wall day (or hour) that cannot match in steps of at most six hours,
// each cut short at the first offset change within it (found by halving):
// within one offset the wall clock moves with Unix time, so no wall time
// is stepped over. It reads no zone bounds from the time package, whose
// ZoneBounds errs (golang/go#81583). limit bounds the walk (the zero time
// past it).
func oracleNext(t *testing.T, s *cron.SpecSchedule, loc *time.Location, after time.Time, limit time.Time) time.Time {
	t.Helper()
	if s.Second != 1 {
		t.Fatalf("oracle takes a seconds field of 0 alone, not %b", s.Second)
	}
	if after.Unix() < 0 {
		t.Fatal("oracle takes times after 1970")
	}
	n := after.Unix()/60*60 + 60
	for n <= limit.Unix() {
		at := time.Unix(n, 0).In(loc)
		if _, off := at.Zone(); off%60 != 0 {
			t.Fatalf("%s at %v: offset %d s is not whole minutes", loc, at, off)
		}
		wall := int64(at.Hour()*3600 + at.Minute()*60)
		switch {
		case 1<<uint(at.Month())&s.Month == 0 || !oracleDay(s, at):
			n = offsetChange(loc, n, n+min(86400-wall, 6*3600))
		case 1<<uint(at.Hour())&s.Hour == 0:
			n = offsetChange(loc, n, n+3600-int64(at.Minute()*60))
		case 1<<uint(at.Minute())&s.Minute == 0:
			n += 60
		default:
			return at
		}
	}
	return time.Time{}
}

// offsetChange returns the first instant in (from, to] at which loc's
// offset differs from its offset at from, or to if there is none (or
// the offset has come back by to).
func offsetChange(loc *time.Location, from, to int64) int64 {
	offset := func(n int64) int {
		_, off := time.Unix(n, 0).In(loc).Zone()
		return off
	}
	if offset(to) == offset(from) {
		return to
	}
	lo, hi := from, to // offset(lo) is the first, offset(hi) is not
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; offset(mid) == offset(from) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// oracleDay is robfig/cron's day rule, written apart from dayMatches: a
// spec whose day of month or day of week is * needs both to hold, one
// that has neither as * either.
func oracleDay(s *cron.SpecSchedule, at time.Time) bool {
	const star = 1 << 63
	dom := s.Dom&(1<<uint(at.Day())) != 0
	dow := s.Dow&(1<<uint(at.Weekday())) != 0
	if s.Dom&star != 0 || s.Dow&star != 0 {
		return dom && dow
	}
	return dom || dow
}

// oracleZones are zones whose offsets change in odd ways: by 30 minutes
// (Lord_Howe), by 2 hours (Troll), over midnight (Sao_Paulo, Gaza), a
// whole day skipped (Apia, 2011-12-30), twice a year each way
// (Casablanca's Ramadan), off the hour (Chatham, Kolkata, St_Johns).
var oracleZones = []string{
	"UTC", "Europe/London", "America/New_York", "Australia/Lord_Howe",
	"Pacific/Chatham", "Asia/Kolkata", "America/St_Johns", "Antarctica/Troll",
	"Pacific/Apia", "Pacific/Kiritimati", "America/Sao_Paulo",
	"Africa/Casablanca", "Asia/Gaza",
}

// oracleSpecs are the specs compared; rare ones (a day a year or fewer)
// are compared from fewer starting points, their walk being long.
var oracleSpecs = []struct {
	spec string
	rare bool
}{
	{"* * * * *", false},
	{"*/7 * * * *", false},
	{"30 1 * * *", false},
	{"0 0 * * *", false},
	{"59 23 * * *", false},
	{"0 2 * * *", false},
	{"30 2 * * 0", false},
	{"15 3 * * 1-5", false},
	{"0 12 13 * 5", false},
	{"0 0 31 * *", false},
	{"@hourly", false},
	{"@daily", false},
	{"@weekly", false},
	{"0 0 29 2 *", true},
	{"0 0 1 1 *", true},
	{"@yearly", true},
}

// offsetChanges lists loc's offset changes from 2010 to 2027, as Unix
// seconds, found by sampling the offset every six hours.
func offsetChanges(loc *time.Location) []int64 {
	var out []int64
	stop := time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	for n := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC).Unix(); n < stop; {
		c := offsetChange(loc, n, n+6*3600)
		if c < n+6*3600 {
			out = append(out, c)
		}
		n = c
	}
	return out
}

// TestNextWallOracle compares nextWall (through Schedule.Next) with
// oracleNext around every offset change of 2010 to 2027 of zones whose
// clocks move in odd ways, and at random times.
func TestNextWallOracle(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	// around a change: just before, at, just after, and in the hours and
	// day each side, where a daily time falls
	near := []int64{-86400 - 1800, -3601, -1800, -61, -1, 0, 1, 59, 1800, 7200}
	compared := 0
	for _, zone := range oracleZones {
		loc, err := loadZone(zone)
		if err != nil {
			t.Fatal(err)
		}
		changes := offsetChanges(loc)
		if zone != "UTC" && zone != "Pacific/Kiritimati" && zone != "Asia/Kolkata" && len(changes) == 0 {
			t.Fatalf("%s: no offset change found", zone)
		}
		var starts []int64
		for _, c := range changes {
			for _, d := range near {
				starts = append(starts, c+d)
			}
			starts = append(starts, c-int64(rng.Intn(3*86400)), c+int64(rng.Intn(3*86400)))
		}
		lo, hi := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
		for i := 0; i < 40; i++ {
			starts = append(starts, lo+rng.Int63n(hi-lo))
		}
		// the last days of leap years, where Go's ZoneBounds errs
		// (golang/go#81583)
		for y := 2012; y <= 2028; y += 4 {
			for _, h := range []int{-36, -12, 0, 12, 23} {
				starts = append(starts, time.Date(y, 12, 31, h, 0, 0, 0, time.UTC).Unix())
			}
		}
		for _, sp := range oracleSpecs {
			sched, err := cron.ParseStandard(sp.spec)
			if err != nil {
				t.Fatal(err)
			}
			spec := sched.(*cron.SpecSchedule)
			s := &Schedule{spec: sp.spec, location: loc, sched: sched}
			for i, u := range starts {
				if sp.rare && i%40 != 0 {
					continue
				}
				// a fraction of a second too, now and then
				from := time.Unix(u, int64(rng.Intn(3))*400_000_000)
				want := oracleNext(t, spec, loc, from, from.AddDate(6, 0, 0))
				got := s.Next(from)
				compared++
				if !got.Equal(want) {
					t.Errorf("%s in %s, Next(%s = %s): %s, oracle %s", sp.spec, zone,
						from.UTC().Format(time.RFC3339Nano), from.In(loc).Format("2006-01-02 15:04:05 -0700"),
						fmtWall(got, loc), fmtWall(want, loc))
				}
			}
		}
	}
	t.Logf("%d times compared", compared)
}

// fmtWall shows an instant in UTC and on loc's wall clock.
func fmtWall(v time.Time, loc *time.Location) string {
	if v.IsZero() {
		return "zero"
	}
	return v.UTC().Format(time.RFC3339) + " (" + v.In(loc).Format("2006-01-02 15:04:05 -0700") + ")"
}

// TestOracleSteps holds the oracle's steps over days and hours to a walk
// a minute at a time, for the zones' changes of one year: a skip that
// went past a wall time would show here.
func TestOracleSteps(t *testing.T) {
	specs := []string{"30 1 * * *", "0 2 * * *", "59 23 * * *", "0 0 * * *", "15 3 * * 1-5"}
	for _, zone := range oracleZones {
		loc, err := loadZone(zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range offsetChanges(loc) {
			if y := time.Unix(c, 0).Year(); y != 2011 && y != 2026 {
				continue
			}
			for _, spec := range specs {
				sched, _ := cron.ParseStandard(spec)
				s := sched.(*cron.SpecSchedule)
				from := time.Unix(c-2*86400, 0)
				to := from.Unix() + 5*86400
				var walk, steps []string
				for n := from.Unix()/60*60 + 60; n <= to; n += 60 {
					at := time.Unix(n, 0).In(loc)
					if s.Month&(1<<uint(at.Month())) != 0 && oracleDay(s, at) && s.Hour&(1<<uint(at.Hour())) != 0 && s.Minute&(1<<uint(at.Minute())) != 0 {
						walk = append(walk, fmtWall(at, loc))
					}
				}
				for n := oracleNext(t, s, loc, from, time.Unix(to, 0)); !n.IsZero(); n = oracleNext(t, s, loc, n, time.Unix(to, 0)) {
					steps = append(steps, fmtWall(n, loc))
				}
				if diff := cmp.Diff(walk, steps); diff != "" {
					t.Errorf("%s in %s from %s: minute walk -, oracle +\n%s", spec, zone, from.UTC(), diff)
				}
			}
		}
	}
}

// TestNextWallFixedTimeOracle compares Next for fixed-time schedules with
// a walk a minute at a time over five days around each offset change of
// 2011 and 2026 of zones whose clocks move in odd ways: a wall time that
// happens ticks at its first occurrence only, and one that happens at no
// minute of the walk ticks at the first minute whose wall clock reads
// past it (the instant the clock jumped over it), once however many did.
func TestNextWallFixedTimeOracle(t *testing.T) {
	specs := []string{"30 1 * * *", "0 2 * * *", "59 23 * * *", "0 0 * * *", "15 3 * * 1-5", "0,30 2 * * *", "45 2 * * 0", "0 1-3 * * *", "@daily"}
	for _, zone := range oracleZones {
		loc, err := loadZone(zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range offsetChanges(loc) {
			if y := time.Unix(c, 0).Year(); y != 2011 && y != 2026 {
				continue
			}
			from, to := c/60*60-2*86400, c/60*60+2*86400
			wallOf := func(n int64) int64 {
				_, off := time.Unix(n, 0).In(loc).Zone()
				return n + int64(off)
			}
			// each wall minute's first instant, from a day before the window
			first := map[int64]int64{}
			var walk []int64
			for n := from - 86400; n <= to+86400; n += 60 {
				if _, seen := first[wallOf(n)]; !seen {
					first[wallOf(n)] = n
				}
				walk = append(walk, n)
			}
			for _, spec := range specs {
				if !cronFixedTime(spec) {
					t.Fatalf("%s is not a fixed-time spec", spec)
				}
				sched, _ := cron.ParseStandard(spec)
				s := sched.(*cron.SpecSchedule)
				matches := func(wall int64) bool {
					at := time.Unix(wall, 0).UTC()
					return s.Month&(1<<uint(at.Month())) != 0 && oracleDay(s, at) && s.Hour&(1<<uint(at.Hour())) != 0 && s.Minute&(1<<uint(at.Minute())) != 0
				}
				set := map[int64]bool{}
				for _, n := range walk {
					if w := wallOf(n); n > from && n <= to && matches(w) && first[w] == n {
						set[n] = true
					}
				}
				for w := wallOf(from) - 86400; w <= wallOf(to)+86400; w += 60 {
					if _, happens := first[w]; happens || !matches(w) {
						continue
					}
					for _, n := range walk {
						if wallOf(n) > w {
							if n > from && n <= to {
								set[n] = true
							}
							break
						}
					}
				}
				var want, got []string
				for _, n := range walk {
					if set[n] {
						want = append(want, fmtWall(time.Unix(n, 0), loc))
					}
				}
				sc := &Schedule{spec: spec, location: loc, sched: sched, fixed: true}
				for n := sc.Next(time.Unix(from, 0)); !n.IsZero() && n.Unix() <= to; n = sc.Next(n) {
					got = append(got, fmtWall(n, loc))
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s in %s from %s: minute walk -, Next +\n%s", spec, zone, time.Unix(from, 0).UTC(), diff)
				}
			}
		}
	}
}
