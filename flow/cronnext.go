package flow

import (
	"math"
	"time"

	"github.com/robfig/cron/v3"
)

// nextWall returns the first time strictly after t (in loc) at which the wall
// clock of loc reads a time s matches (the zero time when there is none
// within five years, as robfig/cron answers). A wall time that does not
// happen (the clock jumps over it) is skipped; one that happens twice
// (the clock falls back over it) is matched twice, in the order they
// happen. robfig/cron's own Next walks the wall clock by adding hours and
// minutes to an instant, which holds for changes of a whole hour but not
// for Australia/Lord_Howe's 30 minutes: it added a time the schedule
// does not hold (02:30 to a daily 01:30) and stepped over some it does
// (the 02:00 and 12:00 of the days of the change).
func nextWall(s *cron.SpecSchedule, loc *time.Location, t time.Time) time.Time {
	after := t.Unix() // times are whole seconds: n > t is n.Unix() > after
	y, m, d := t.In(loc).Date()
	// the day before too: a clock falling back over midnight shows it
	// again after t
	day := time.Date(y, m, d-1, 0, 0, 0, 0, time.UTC)
	for limit := y + 5; day.Year() <= limit; day = day.AddDate(0, 0, 1) {
		n, ok := firstOnDay(s, loc, day, after)
		if !ok {
			continue
		}
		// a clock falling back over midnight shows the next day's first
		// times before the end of this one's
		if m, ok := firstOnDay(s, loc, day.AddDate(0, 0, 1), after); ok && m < n {
			n = m
		}
		return time.Unix(n, 0).In(loc)
	}
	return time.Time{}
}

// zonePeriod is a stretch of time, [start, end) in Unix seconds, during
// which a zone's offset is offset seconds.
type zonePeriod struct{ start, end, offset int64 }

// firstOnDay returns, in Unix seconds, the first time after after at
// which loc's wall clock reads a time of the calendar day day (given at
// 00:00 UTC) that s matches.
func firstOnDay(s *cron.SpecSchedule, loc *time.Location, day time.Time, after int64) (int64, bool) {
	if 1<<uint(day.Month())&s.Month == 0 || !dayMatches(s, day) {
		return 0, false
	}
	base := day.Unix() // the day's 00:00 on the wall clock, read as UTC
	if base+86400+maxOffset <= after {
		return 0, false // the whole day had passed
	}
	best, found := int64(0), false
	for _, p := range zonePeriods(loc, base-maxOffset, base+86400+maxOffset) {
		// the wall times of the day that happen during p, in order
	hours:
		for h := int64(0); h < 24; h++ {
			if hour := base + h*3600 - p.offset; 1<<uint(h)&s.Hour == 0 || !meets(hour, hour+3600, after, p) {
				continue
			}
			for mi := int64(0); mi < 60; mi++ {
				if minute := base + h*3600 + mi*60 - p.offset; 1<<uint(mi)&s.Minute == 0 || !meets(minute, minute+60, after, p) {
					continue
				}
				for sec := int64(0); sec < 60; sec++ {
					if 1<<uint(sec)&s.Second == 0 {
						continue
					}
					n := base + h*3600 + mi*60 + sec - p.offset
					if n <= after || n < p.start || n >= p.end {
						continue
					}
					if !found || n < best {
						best, found = n, true
					}
					break hours // the later wall times of p come later
				}
			}
		}
	}
	return best, found
}

// meets reports whether [from, to) holds a time after after that is in p.
func meets(from, to, after int64, p zonePeriod) bool {
	return to-1 > after && to > p.start && from < p.end
}

// maxOffset bounds a zone's offset from UTC (±14 hours in practice), with
// room to spare.
const maxOffset = 26 * 3600

// zonePeriods lists loc's periods of one offset that meet [from, to) (one
// offset may be cut in two).
func zonePeriods(loc *time.Location, from, to int64) []zonePeriod {
	var out []zonePeriod
	at := time.Unix(from, 0).In(loc)
	for {
		_, off := at.Zone()
		start, end := at.ZoneBounds()
		if !end.IsZero() && !end.After(at) {
			// golang/go#81583: in the last UTC day of a leap year read by
			// the zone's TZ rule, ZoneBounds ends the offset at that day's
			// start (its year 365 days long), and the loop went round for
			// ever. The rule is read a UTC year at a time, so the offset
			// holds to the next year's start.
			end = time.Date(at.UTC().Year()+1, 1, 1, 0, 0, 0, 0, time.UTC)
		}
		p := zonePeriod{start: math.MinInt64, end: math.MaxInt64, offset: int64(off)}
		if !start.IsZero() {
			p.start = start.Unix()
		}
		if !end.IsZero() {
			p.end = end.Unix()
		}
		out = append(out, p)
		if p.end >= to {
			return out
		}
		at = end.In(loc)
	}
}

// dayMatches reports whether day (a calendar date) satisfies s's day of
// month and day of week, as robfig/cron reads them: both must hold when
// either is *, one is enough otherwise.
func dayMatches(s *cron.SpecSchedule, day time.Time) bool {
	const starBit = 1 << 63
	dom := 1<<uint(day.Day())&s.Dom > 0
	dow := 1<<uint(day.Weekday())&s.Dow > 0
	if s.Dom&starBit > 0 || s.Dow&starBit > 0 {
		return dom && dow
	}
	return dom || dow
}
