package flow

import (
	"math"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// nextWall returns the first time strictly after t (in loc) at which s
// ticks in loc (the zero time when there is none within five years, as
// robfig/cron answers). A wildcard schedule (fixed false) ticks at the
// times the wall clock reads: a wall time that does not happen (the clock
// jumps over it) is skipped; one that happens twice (the clock falls back
// over it) is matched twice, in the order they happen. A fixed-time
// schedule (fixed true: see cronFixedTime) ticks as Vixie cron runs a
// fixed-time job: a wall time that happens twice ticks once, at its first
// occurrence, and one the clock jumps over ticks at the first instant
// after the jump (once, however many of its times the jump passed over).
// robfig/cron's own Next walks the wall clock by adding hours and
// minutes to an instant, which holds for changes of a whole hour but not
// for Australia/Lord_Howe's 30 minutes: it added a time the schedule
// does not hold (02:30 to a daily 01:30) and stepped over some it does
// (the 02:00 and 12:00 of the days of the change).
func nextWall(s *cron.SpecSchedule, loc *time.Location, t time.Time, fixed bool) time.Time {
	after := t.Unix() // times are whole seconds: n > t is n.Unix() > after
	y, m, d := t.In(loc).Date()
	// the day before too: a clock falling back over midnight shows it
	// again after t
	day := time.Date(y, m, d-1, 0, 0, 0, 0, time.UTC)
	for limit := y + 5; day.Year() <= limit; day = day.AddDate(0, 0, 1) {
		n, ok := firstOnDay(s, loc, day, after, fixed)
		if !ok {
			continue
		}
		// a clock falling back over midnight shows the next day's first
		// times before the end of this one's
		if m, ok := firstOnDay(s, loc, day.AddDate(0, 0, 1), after, fixed); ok && m < n {
			n = m
		}
		return time.Unix(n, 0).In(loc)
	}
	return time.Time{}
}

// cronFixedTime reports whether spec, a cron expression, is a fixed-time
// one as Vixie cron reads it: neither its minute nor its hour field
// begins with * (nor with ?, robfig/cron's other way to write it); of the
// descriptors, all but @hourly (0 * * * *). The others are wildcard
// schedules.
func cronFixedTime(spec string) bool {
	fields := strings.Fields(spec)
	if len(fields) == 1 && strings.HasPrefix(fields[0], "@") {
		return fields[0] != "@hourly" && fields[0] != "@every"
	}
	if len(fields) != 5 {
		return false
	}
	for _, f := range fields[:2] {
		if strings.HasPrefix(f, "*") || strings.HasPrefix(f, "?") {
			return false
		}
	}
	return true
}

// zonePeriod is a stretch of time, [start, end) in Unix seconds, during
// which a zone's offset is offset seconds.
type zonePeriod struct{ start, end, offset int64 }

// firstOnDay returns, in Unix seconds, the first time after after at
// which s ticks for a wall time of the calendar day day (given at 00:00
// UTC): when loc's wall clock reads a time of the day that s matches, or,
// for a fixed-time schedule, at the first of those times only when the
// clock shows it twice, and at the instant the clock jumps when it jumps
// over one.
func firstOnDay(s *cron.SpecSchedule, loc *time.Location, day time.Time, after int64, fixed bool) (int64, bool) {
	if 1<<uint(day.Month())&s.Month == 0 || !dayMatches(s, day) {
		return 0, false
	}
	base := day.Unix() // the day's 00:00 on the wall clock, read as UTC
	if base+86400+maxOffset <= after {
		return 0, false // the whole day had passed
	}
	best, found := int64(0), false
	periods := zonePeriods(loc, base-maxOffset, base+86400+maxOffset)
	for i, p := range periods {
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
					wall := base + h*3600 + mi*60 + sec
					n := wall - p.offset
					if n <= after || n < p.start || n >= p.end {
						continue
					}
					if fixed && happens(wall, periods[:i]) {
						continue // its first occurrence ticked
					}
					if !found || n < best {
						best, found = n, true
					}
					break hours // the later wall times of p come later
				}
			}
		}
	}
	if !fixed {
		return best, found
	}
	// the clock jumping forward from p to q passes over the wall times
	// [q.start+p.offset, q.start+q.offset): one of them that s matches,
	// and that happens at no other time, ticks at q.start
	for i := 1; i < len(periods); i++ {
		p, q := periods[i-1], periods[i]
		if at := q.start; q.offset > p.offset && at > after && (!found || at < best) && inGap(s, base, at+p.offset, at+q.offset, periods) {
			best, found = at, true
		}
	}
	return best, found
}

// happens reports whether the wall time wall (read as UTC) happens during
// one of periods.
func happens(wall int64, periods []zonePeriod) bool {
	for _, p := range periods {
		if n := wall - p.offset; n >= p.start && n < p.end {
			return true
		}
	}
	return false
}

// inGap reports whether a wall time in [from, to) (read as UTC) of the
// day whose 00:00 is base matches s and happens during none of periods.
func inGap(s *cron.SpecSchedule, base, from, to int64, periods []zonePeriod) bool {
	from, to = max(from, base), min(to, base+86400)
	for h := int64(0); h < 24; h++ {
		if hour := base + h*3600; 1<<uint(h)&s.Hour == 0 || hour+3600 <= from || hour >= to {
			continue
		}
		for mi := int64(0); mi < 60; mi++ {
			if minute := base + h*3600 + mi*60; 1<<uint(mi)&s.Minute == 0 || minute+60 <= from || minute >= to {
				continue
			}
			for sec := int64(0); sec < 60; sec++ {
				if wall := base + h*3600 + mi*60 + sec; 1<<uint(sec)&s.Second != 0 && wall >= from && wall < to && !happens(wall, periods) {
					return true
				}
			}
		}
	}
	return false
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
