package flow

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/textproto"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"go.yaml.in/yaml/v3"

	"github.com/nexushq/nexus/lineerr"
	"github.com/nexushq/nexus/naming"
)

// ErrNotFlow is returned by Compile for Markdown that is not a flow file
// (see IsFlowFile).
var ErrNotFlow = errors.New("not a flow file: it does not start with front matter holding flowmarkdown_version")

// Version is the FlowMarkdown version this compiler accepts.
const Version = "0.1"

// Compile compiles one flow file. path is used in error messages only. On
// any error it returns a nil *Flow and an ErrorList holding every error of
// the file, sorted by line.
func Compile(path string, src []byte) (*Flow, error) {
	if !IsFlowFile(src) {
		return nil, ErrNotFlow
	}
	canon := Canonical(src)
	c := &compiler{path: path}
	f := c.compile(string(canon))
	if len(c.errs) > 0 {
		slices.SortStableFunc(c.errs, func(a, b *Error) int { return a.Line - b.Line })
		return nil, c.errs
	}
	f.path = path
	f.source = canon
	return f, nil
}

type compiler struct {
	path string
	errs ErrorList
}

func (c *compiler) errorf(line int, format string, args ...any) {
	c.errs = append(c.errs, &Error{File: c.path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (c *compiler) compile(src string) *Flow {
	raw := c.split(src)
	f := &Flow{
		retry: Retry{
			MaxAttempts:   DefaultMaxAttempts,
			InitialDelay:  DefaultInitialDelay,
			BackoffFactor: DefaultBackoffFactor,
			MaxDelay:      DefaultMaxDelay,
		},
		timeout: DefaultTimeout,
	}
	if !raw.closed {
		return f
	}
	declared := c.frontMatter(f, raw)
	steps := 0
	for _, sec := range raw.sections {
		if !sec.fault {
			steps++
		}
	}
	if steps == 0 {
		c.errorf(1, "the flow has no steps: add a `## Step: NAME` section")
	}
	names := map[string]int{}
	for _, sec := range raw.sections {
		s := c.step(f, sec, declared)
		if first, dup := names[sec.name]; dup && sec.name != "" {
			c.errorf(sec.line, "duplicate step name %s (first used at line %d): step names are unique across ## Step: and ## Fault: sections", quoted(sec.name), first)
		} else {
			names[sec.name] = sec.line
		}
		if s.fault {
			f.faults = append(f.faults, s)
		} else {
			f.steps = append(f.steps, s)
		}
	}
	return f
}

// frontMatter reads the front matter keys into f and returns the declared
// effects, or nil when the front matter could not be read (so that steps
// are not blamed for effects it may well declare).
func (c *compiler) frontMatter(f *Flow, raw *rawFile) map[Effect]bool {
	declared := map[Effect]bool{}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(raw.frontMatter), &doc); err != nil {
		c.errorf(raw.frontMatterLine+yamlErrorLine(raw.frontMatter, err)-1, "front matter is not valid YAML: %s", yamlMessage(err))
		return nil
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		c.errorf(1, "front matter must be a YAML mapping of keys to values")
		return nil
	}
	m := doc.Content[0]
	lineerr.MarkNonSpecificTags(m, strings.Split(raw.frontMatter, "\n"))
	at := func(n *yaml.Node) int { return raw.frontMatterLine + n.Line - 1 }
	if lineerr.Tagged(m) {
		// `!foo` on a line of its own tags the whole front matter: refused
		// as a tag on any of its values is
		c.errorf(at(m), "front matter must be a YAML mapping of keys to values, not a value tagged %s", clipped(m.Tag))
		return nil
	}
	// keyLine is the line of the key of each value of the mapping: an
	// error about a value is reported on its key's line, also when the
	// value is written on the lines below the key
	keyLine := map[*yaml.Node]int{}
	lineOf := func(n *yaml.Node) int {
		if l, ok := keyLine[n]; ok {
			return l
		}
		return at(n)
	}
	seen := map[string]int{}
	var (
		tenantNode, flowNode                 *yaml.Node
		tzNode, inputNode, scheduleNode      *yaml.Node
		onFailureNode, ttlNode, dedupKeyNode *yaml.Node
	)
	dedup := Dedup{TTL: DefaultDedupTTL}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias // *d reads as the value &d names
		}
		key := k.Value
		if k.Kind != yaml.ScalarNode {
			// a complex key (? [a, b]) names no key
			c.errorf(at(k), "a front matter key is a name, not %s", lineerr.Describe(k))
			continue
		}
		if lineerr.Tagged(k) {
			// `!foo description: x`: refused, the value read all the same
			c.errorf(at(k), "a front matter key is a name, not a value tagged %s", clipped(k.Tag))
		}
		if first, dup := seen[key]; dup {
			c.errorf(at(k), "front matter key %s is set twice (first at line %d)", clipped(key), first)
			continue
		}
		seen[key] = at(k)
		line := at(k)
		keyLine[v] = line
		switch key {
		case "flowmarkdown_version":
			if lineerr.Tagged(v) {
				c.errorf(line, "flowmarkdown_version must be a string, not a value tagged %s", clipped(v.Tag))
			} else if v.Kind != yaml.ScalarNode || v.Value != Version {
				c.errorf(line, "flowmarkdown_version %s is not supported: this compiler reads \"0.1\"", quoted(v.Value))
			}
		case "flow":
			flowNode = v
		case "tenant":
			tenantNode = v
		case "description":
			if s, ok := c.str(line, key, v); ok {
				f.description = s
			}
		case "effects":
			for _, e := range c.effectList(line, key, v) {
				if declared[e] {
					c.errorf(line, "effects lists %s twice", e)
				}
				declared[e] = true
				f.effects = append(f.effects, e)
			}
		case "queue_max_attempts":
			if n, ok := c.integer(line, key, v, 1, maxAttempts); ok {
				f.retry.MaxAttempts = int(n)
			}
		case "queue_initial_delay_ms":
			if n, ok := c.integer(line, key, v, 0, maxMillis); ok {
				f.retry.InitialDelay = time.Duration(n) * time.Millisecond
			}
		case "queue_backoff_factor":
			if x, ok := c.number(line, key, v, 1); ok {
				f.retry.BackoffFactor = x
			}
		case "queue_max_delay_ms":
			if n, ok := c.integer(line, key, v, 0, maxMillis); ok {
				f.retry.MaxDelay = time.Duration(n) * time.Millisecond
			}
		case "max_body_bytes":
			if n, ok := c.integer(line, key, v, 1, maxMillis); ok {
				f.maxBodyBytes = n
			}
		case "timeout_ms":
			if n, ok := c.integer(line, key, v, 1, maxMillis); ok {
				f.timeout = time.Duration(n) * time.Millisecond
			}
		case "schedule":
			scheduleNode = v
		case "schedule_timezone":
			tzNode = v
		case "schedule_input":
			inputNode = v
		case "dedup_key":
			dedupKeyNode = v
			if s, ok := c.str(line, key, v); ok {
				t, err := CompileTemplate(s)
				switch {
				case err != nil:
					c.errorf(line, "dedup_key: %s", err)
				case len(t.parts) == 0 || t.parts[0].expr == nil && len(t.parts) == 1:
					c.errorf(line, "dedup_key %s has no {{ }} hole, so every message would share one key: write e.g. \"{{ $.orderId }}\"", quoted(s))
				default:
					dedup.Key = t
				}
			}
		case "dedup_on_failure":
			onFailureNode = v
			if s, ok := c.str(line, key, v); ok {
				switch s {
				case "rerun":
				case "absorb":
					dedup.Absorb = true
				default:
					c.errorf(line, "dedup_on_failure must be rerun or absorb, not %s", quoted(s))
				}
			}
		case "dedup_ttl_ms":
			ttlNode = v
			if n, ok := c.integer(line, key, v, 1, maxMillis); ok {
				dedup.TTL = time.Duration(n) * time.Millisecond
			}
		default:
			// quoted: a key with a blank, a tab or a line break reads
			// as what it is
			c.errorf(line, "unknown front matter key %s%s", quoted(key), naming.Suggest(key, frontMatterKeys))
		}
	}

	// names
	tenantVal, flowVal := nodeText(tenantNode), nodeText(flowNode)
	if flowNode == nil {
		c.errorf(1, "the front matter has no flow: key (the flow's name)")
	} else if err := naming.Check(flowVal, naming.Flow(tenantVal)); err != nil || flowNode.Kind != yaml.ScalarNode || lineerr.Tagged(flowNode) {
		c.nameError(lineOf(flowNode), flowNode, err, "flow")
	}
	if tenantNode == nil {
		c.errorf(1, "the front matter has no tenant: key (the tenant that owns the flow)")
	} else if err := naming.Check(tenantVal, naming.Tenant(flowVal)); err != nil || tenantNode.Kind != yaml.ScalarNode || lineerr.Tagged(tenantNode) {
		c.nameError(lineOf(tenantNode), tenantNode, err, "tenant")
	}
	f.tenant, f.name = tenantVal, flowVal
	if flowNode != nil {
		f.nameLine = lineOf(flowNode)
	}

	// schedule
	if scheduleNode != nil {
		f.schedule = c.schedule(lineOf(scheduleNode), scheduleNode, tzNode, inputNode, lineOf)
		if f.schedule != nil && inputNode != nil && f.maxBodyBytes > 0 {
			// cron is one of the flow's doors: its message is held to the
			// flow's ceiling too
			if n := len(AppendJSON(nil, f.schedule.input)); int64(n) > f.maxBodyBytes {
				c.errorf(lineOf(inputNode), "schedule_input is %d bytes as JSON, over the flow's max_body_bytes (%d)", n, f.maxBodyBytes)
				f.schedule = nil
			}
		}
	} else {
		for _, n := range []struct {
			node *yaml.Node
			key  string
		}{{tzNode, "schedule_timezone"}, {inputNode, "schedule_input"}} {
			if n.node != nil {
				c.errorf(lineOf(n.node), "%s has no effect without schedule:", n.key)
			}
		}
	}
	// dedup
	if dedupKeyNode != nil {
		if dedup.Key != nil {
			f.dedup = &dedup
		}
	} else {
		for _, n := range []struct {
			node *yaml.Node
			key  string
		}{{onFailureNode, "dedup_on_failure"}, {ttlNode, "dedup_ttl_ms"}} {
			if n.node != nil {
				c.errorf(lineOf(n.node), "%s has no effect without dedup_key:", n.key)
			}
		}
	}
	return declared
}

var frontMatterKeys = []string{
	"flowmarkdown_version", "flow", "tenant", "description", "effects",
	"queue_max_attempts", "queue_initial_delay_ms", "queue_backoff_factor", "queue_max_delay_ms",
	"max_body_bytes", "timeout_ms", "schedule", "schedule_timezone", "schedule_input",
	"dedup_key", "dedup_on_failure", "dedup_ttl_ms",
}

func (c *compiler) nameError(line int, n *yaml.Node, err error, field string) {
	if lineerr.Tagged(n) {
		c.errorf(line, "%s must be a name, not a value tagged %s", field, clipped(n.Tag))
		return
	}
	if n.Kind != yaml.ScalarNode {
		c.errorf(line, "%s must be a name, not %s", field, lineerr.Describe(n))
		return
	}
	c.errorf(line, "%s", err)
}

func (c *compiler) schedule(line int, v, tzNode, inputNode *yaml.Node, at func(*yaml.Node) int) *Schedule {
	spec, ok := c.str(line, "schedule", v)
	if !ok {
		return nil
	}
	s := &Schedule{spec: spec, location: time.UTC, input: NewObject(nil, nil)}
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		c.errorf(line, "schedule %s carries a time zone: set it with schedule_timezone instead", quoted(spec))
		ok = false
	} else if every, isEvery := strings.CutPrefix(spec, "@every "); isEvery && everyBelowSecond(every) {
		c.errorf(line, "schedule %s ticks more often than once a second: the shortest period is @every 1s", quoted(spec))
		ok = false
	} else if isEvery && !everyWholeSeconds(every) {
		// the cron library rounds the period down to a whole second
		c.errorf(line, "schedule %s is not a whole number of seconds: the period of @every counts whole seconds", quoted(spec))
		ok = false
	} else if parsed, msg := cronFields(spec); msg != "" {
		c.errorf(line, "schedule %s is not a cron expression (five fields, or @every 30s, @hourly, @daily…): %s", quoted(spec), msg)
		ok = false
	} else if sched, err := cron.ParseStandard(parsed.spec); err != nil {
		c.errorf(line, "schedule %s is not a cron expression (five fields, or @every 30s, @hourly, @daily…): %s", quoted(spec), clipped(parsed.asWritten(err)))
		ok = false
	} else if sched.Next(scheduleProbe).IsZero() {
		c.errorf(line, "schedule %s never fires (no such date)", quoted(spec))
		ok = false
	} else {
		s.sched, s.fixed = sched, cronFixedTime(parsed.spec)
	}
	if tzNode != nil {
		if name, isStr := c.str(at(tzNode), "schedule_timezone", tzNode); isStr {
			loc, err := loadZone(name)
			if err != nil {
				c.errorf(at(tzNode), "schedule_timezone %s is not an IANA time zone (e.g. Europe/Berlin)", quoted(name))
				ok = false
			} else {
				s.location = loc
			}
		} else {
			ok = false
		}
	}
	if inputNode != nil {
		in, err := yamlDocument(inputNode, &yamlBudget{left: maxScheduleInput})
		errLine := at(inputNode)
		if ne, isNode := err.(*nodeError); isNode {
			errLine = at(ne.node) // the value's line, when it is written over lines
		}
		if err == nil {
			if str, isStr := in.(string); isStr && inputNode.Tag == "!!str" {
				in, err = ParseJSON([]byte(str), 0)
			}
		}
		if _, isObj := in.(*Object); err != nil || !isObj {
			msg := "schedule_input must be a JSON object, e.g. {\"source\": \"cron\"}"
			switch {
			case errors.Is(err, errOverBudget):
				msg = err.Error()
			case err != nil:
				msg += ": " + err.Error()
			}
			c.errorf(errLine, "%s", msg)
			ok = false
		} else if depth := nesting(in); depth > DefaultMaxDepth {
			// what a door would refuse in a body, and its worker could not read
			c.errorf(at(inputNode), "schedule_input nests %d levels deep: at most %d, as a message's body", depth, DefaultMaxDepth)
			ok = false
		} else {
			s.input = in
		}
	}
	if !ok {
		return nil
	}
	return s
}

// cronSpec is a cron expression as robfig/cron is given it: the day of
// week field's 7s written as 0 (see cronFields).
type cronSpec struct {
	spec    string
	fields  []string          // spec's fields; nil for a descriptor or a wrong count
	written map[string]string // a range of the day of week field given robfig/cron, to the range as written
}

// asWritten is robfig/cron's error about the expression, naming a range
// of the day of week field as it is written, not as robfig/cron was given
// it (5-7/0, not 5-6/0).
func (c cronSpec) asWritten(err error) string {
	msg := err.Error()
	if c.fields == nil {
		return msg
	}
	star := append(slices.Clone(c.fields[:4]), "*")
	if _, starErr := cron.ParseStandard(strings.Join(star, " ")); starErr != nil {
		return msg // an error of another field
	}
	for given, written := range c.written {
		if m, ok := strings.CutSuffix(msg, ": "+given); ok {
			return m + ": " + written
		}
	}
	return msg
}

// cronFieldNames names the five fields of a cron expression, in order.
var cronFieldNames = [5]string{"minute", "hour", "day of month", "month", "day of week"}

// cronDays are the names robfig/cron reads in the day of week field.
var cronDays = map[string]int{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}

// cronFields reads the five fields of a cron expression where robfig/cron
// reads them other than as written, and returns the expression to give it,
// or an error:
//
//   - a list with an empty element (1,2,,3, a leading or a trailing comma)
//     is an error naming the field: robfig/cron skips the empty element,
//     so a number left out compiled as the list without it;
//   - 7 in the day of week field is Sunday, as 0 is, as most crons and
//     crontab(5) read it (robfig/cron takes 0 to 6): 7 alone or as 7-7 is
//     given as 0, 7-7/step as 0-0/step (its step read as any range's), a
//     range ending at 7 (5-7, 1-7/2) as the range ending at 6 and 0 when
//     its step reaches 7; a day past 7 is an error, and so is a range from
//     7 that runs backwards (7-5, 7/2: see backwardsFromSeven).
//
// A descriptor, and a wrong count of fields, are left to robfig/cron.
func cronFields(spec string) (cronSpec, string) {
	fields := strings.Fields(spec)
	if strings.HasPrefix(spec, "@") || len(fields) != len(cronFieldNames) {
		return cronSpec{spec: spec}, ""
	}
	for i, f := range fields {
		if slices.Contains(strings.Split(f, ","), "") {
			return cronSpec{}, fmt.Sprintf("the %s field %s has an empty element in its list", cronFieldNames[i], clipped(f))
		}
	}
	out := cronSpec{fields: fields, written: map[string]string{}}
	dow := fields[4]
	var elems []string
	for _, e := range strings.Split(dow, ",") {
		rng, step, hasStep := strings.Cut(e, "/")
		lo, hi, isRange := strings.Cut(rng, "-")
		for _, part := range []string{lo, hi} {
			if n, err := strconv.Atoi(part); err == nil && n > 7 {
				return cronSpec{}, fmt.Sprintf("the day of week field %s holds %d: days of the week are 0 to 7 (0 and 7 are Sunday) or sun to sat", clipped(dow), n)
			}
		}
		from, fromErr := strconv.Atoi(lo)
		if d, named := cronDays[strings.ToLower(lo)]; named {
			from, fromErr = d, nil
		}
		if msg := backwardsFromSeven(dow, e); msg != "" {
			return cronSpec{}, msg
		}
		switch to, err := strconv.Atoi(hi); {
		case !isRange && !hasStep && fromErr == nil && from == 7, isRange && !hasStep && err == nil && to == 7 && fromErr == nil && from == 7:
			elems = append(elems, "0") // 7, 7-7: Sunday
		case isRange && err == nil && to == 7 && fromErr == nil && from == 7:
			// 7-7/2: Sunday, its step checked as any range's is (7-7/0
			// is refused, as 5-7/0 is)
			given := "0-0/" + step
			out.written[given] = e
			elems = append(elems, given)
		case isRange && err == nil && to == 7:
			given := lo + "-6"
			every := 1
			if hasStep {
				given += "/" + step
				every, err = strconv.Atoi(step)
			}
			out.written[given] = e
			elems = append(elems, given)
			if err == nil && fromErr == nil && every > 0 && (7-from)%every == 0 {
				elems = append(elems, "0")
			}
		default:
			elems = append(elems, e)
		}
	}
	out.fields = slices.Clone(fields)
	out.fields[4] = strings.Join(elems, ",")
	out.spec = strings.Join(out.fields, " ")
	return out, ""
}

// backwardsFromSeven is the error of elem, an element of the day of week
// field dow, when it is a range from 7 that runs backwards: 7-5 (7-fri,
// 7-5/2), or 7/step, which runs from 7 to 6 as N/step does (decisions.md:
// N/step keeps robfig/cron's meaning, N to 6); "" for any other element.
// robfig/cron's own error ("beginning of range (7) beyond end of range
// (6)") said 7 was past the days the compiler says are 0 to 7. A step
// below 1 is refused as robfig/cron refuses it in 5-7/0; one that is not
// a number is left to its error.
func backwardsFromSeven(dow, elem string) string {
	rng, step, hasStep := strings.Cut(elem, "/")
	lo, hi, isRange := strings.Cut(rng, "-")
	if from, err := strconv.Atoi(lo); err != nil || from != 7 || !isRange && !hasStep {
		return ""
	}
	switch every, err := strconv.Atoi(step); {
	case hasStep && err != nil:
		return "" // robfig/cron's error names the step
	case hasStep && every < 1:
		// robfig/cron's words for 5-7/0, where it says 7/0 is past 6
		return "step of range should be a positive number: " + clipped(elem)
	}
	to, err := strconv.Atoi(hi)
	if d, named := cronDays[strings.ToLower(hi)]; named {
		to, err = d, nil
	}
	end, why := hi, ""
	switch {
	case !isRange:
		end, why = "6", ", where N/step ends"
	case err != nil || to >= 7:
		return "" // 7-7, or a day past 7: read elsewhere
	}
	what := "the day of week field " + clipped(dow)
	if dow != elem {
		what += " holds " + clipped(elem) + ", which"
	}
	return fmt.Sprintf("%s runs backwards from %s to %s%s: 7 is Sunday, write %s", what, clipped(lo), clipped(end), why, clipped("0"+elem[len(lo):]))
}

// scheduleProbe is the fixed time from which a schedule must fire within
// the cron library's search horizon, so that compiling does not depend on
// the clock.
var scheduleProbe = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func everyBelowSecond(d string) bool {
	p, err := time.ParseDuration(strings.TrimSpace(d))
	return err == nil && p < time.Second
}

// everyWholeSeconds reports whether an @every period that parses is a
// whole number of seconds (one that does not parse is left to the cron
// library's error).
func everyWholeSeconds(d string) bool {
	p, err := time.ParseDuration(strings.TrimSpace(d))
	return err != nil || p%time.Second == 0
}

// step compiles one section.
func (c *compiler) step(f *Flow, sec *rawSection, declared map[Effect]bool) *Step {
	s := &Step{name: sec.name, line: sec.line, fault: sec.fault}
	kind := "## Step:"
	if s.fault {
		kind = "## Fault:"
	}
	switch {
	case sec.name == "":
		c.errorf(sec.line, "%s has no name: write `%s NAME`", kind, kind)
	case len([]rune(sec.name)) > 64:
		c.errorf(sec.line, "step name %s is longer than 64 characters", quoted(sec.name))
	}

	keys := map[string]rawKey{}
	for _, k := range sec.keys {
		if isHeaderKey(k.key) {
			continue // response headers are operations in order: set, remove, set again
		}
		if first, dup := keys[k.key]; dup {
			c.errorf(k.line, "step %s sets %s twice (first at line %d)", quoted(s.name), clipped(k.key), first.line)
			continue
		}
		keys[k.key] = k
	}
	// The effect first: other keys depend on it. intended is the effect the
	// step names even when it is refused (undeclared), so its keys are
	// still checked; unreadable effects silence the checks of those keys.
	var intended Effect
	effectsUnreadable := false
	if k, ok := keys["effects"]; ok {
		list, ok := c.stepList(k, s)
		switch {
		case !ok:
			effectsUnreadable = true
		case len(list) == 0:
		case len(list) > 1:
			effectsUnreadable = true
			c.errorf(k.line, "step %s lists %d effects: a step has at most one effect", quoted(s.name), len(list))
		default:
			e := Effect(list[0])
			switch {
			case e != EffectHTTPEgress && e != EffectQueuePublish:
				effectsUnreadable = true
				c.errorf(k.line, "unknown effect %s in step %s: effects are http_egress and queue_publish", quoted(list[0]), quoted(s.name))
			case declared != nil && !declared[e]:
				intended = e
				c.errorf(k.line, "step %s uses the effect %s, which the front matter does not declare: add it to effects: at the top of the file", quoted(s.name), e)
			default:
				intended, s.effect = e, e
			}
		}
	}
	if intended == EffectHTTPEgress {
		s.http = &HTTPRequest{Method: DefaultMethod, ReadTimeout: DefaultReadTimeout, ConnectTimeout: DefaultConnectTimeout}
		if _, ok := keys["endpoint"]; !ok {
			c.errorf(sec.line, "step %s has effects: [http_egress] but no endpoint:", quoted(s.name))
		}
	}
	if intended == EffectQueuePublish {
		if _, ok := keys["queue"]; !ok {
			c.errorf(sec.line, "step %s has effects: [queue_publish] but no queue: naming the target flow", quoted(s.name))
		}
	}

	statusKey := ""
	for _, k := range sec.keys {
		if !isHeaderKey(k.key) && keys[k.key].line != k.line {
			continue // a duplicate, reported above
		}
		switch key := k.key; {
		case key == "effects":
		case key == "endpoint" || key == "method" || key == "headers" || key == "read_timeout_ms" || key == "connect_timeout_ms":
			if effectsUnreadable {
				continue
			}
			if intended != EffectHTTPEgress {
				c.errorf(k.line, "%s: belongs to an http_egress step: add effects: [http_egress] to step %s", key, quoted(s.name))
				continue
			}
			if key != "headers" && !c.untag(&k) {
				continue
			}
			c.httpKey(s, k)
		case key == "queue":
			if effectsUnreadable {
				continue
			}
			if intended != EffectQueuePublish {
				c.errorf(k.line, "queue: belongs to a queue_publish step: add effects: [queue_publish] to step %s", quoted(s.name))
				continue
			}
			if !c.untag(&k) {
				continue
			}
			q := scalar(k.value)
			if err := naming.Check(q, naming.Queue(f.tenant, f.name)); err != nil {
				c.errorf(k.line, "%s", err)
				continue
			}
			s.queue = q
		case key == "save_body":
			if !c.untag(&k) {
				continue
			}
			name := scalar(k.value)
			switch {
			case !ctxName.MatchString(name):
				c.errorf(k.line, "save_body %s is not a name: use letters, digits and _ (it becomes ctx.%s)", quoted(name), clipped(name))
			case reservedCtx[name]:
				c.errorf(k.line, "save_body %q would replace the platform's ctx.%s: choose another name", name, name)
			default:
				s.saveBody = name
			}
		case key == "when":
			e, err := CompileExpr(scalar(k.value))
			if parses(err) {
				c.errorf(k.line, "when: %s", err)
				continue
			}
			if err != nil {
				c.errorf(k.line, "when: expression does not parse: %s", err)
				continue
			}
			if err := e.neverBoolean("when:"); err != nil {
				c.errorf(k.line, "%s", err)
				continue
			}
			s.when = e
		case key == "response_status" || key == "fault_status":
			if key == "fault_status" && !s.fault {
				c.errorf(k.line, "fault_status is only allowed in a ## Fault: section: use response_status")
				continue
			}
			if statusKey != "" {
				c.errorf(k.line, "step %s sets both %s and %s: they are one key with two spellings", quoted(s.name), statusKey, key)
				continue
			}
			statusKey = key
			if c.untag(&k) {
				c.status(s, k)
			}
		case key == "response_header_remove" || key == "fault_header_remove":
			if key == "fault_header_remove" && !s.fault {
				c.errorf(k.line, "fault_header_remove is only allowed in a ## Fault: section: use response_header_remove")
				continue
			}
			list, ok := c.stepList(k, s)
			if !ok {
				continue
			}
			for _, name := range list {
				if err := CheckHeaderName(name); err != nil {
					c.errorf(k.line, "%s: %s", key, err)
					continue
				}
				if hasEmptySegment(headerFromKey(name)) {
					// x__y removed "X--Y", a header no answer has
					c.errorf(k.line, "%s: the header name %s has an empty segment: each underscore or hyphen of an entry stands between two of the name's words", key, quoted(headerFromKey(name)))
					continue
				}
				s.headers = append(s.headers, HeaderOp{Name: headerFromKey(name), Remove: true})
			}
		case strings.HasPrefix(key, "response_header_") || strings.HasPrefix(key, "fault_header_"):
			prefix, suffix, _ := strings.Cut(key, "_header_")
			if prefix == "fault" && !s.fault {
				c.errorf(k.line, "%s is only allowed in a ## Fault: section: use response_header_%s", clipped(key), clipped(suffix))
				continue
			}
			name := headerFromKey(suffix)
			if suffix != "" && hasEmptySegment(name) {
				// response_header__x made "-X": no header's name
				c.errorf(k.line, "%s: the header name %s has an empty segment: a key's underscores stand one each between the name's words", clipped(key), quoted(name))
				continue
			}
			if err := CheckHeaderName(name); err != nil {
				c.errorf(k.line, "%s: %s", clipped(key), err)
				continue
			}
			if !c.untag(&k) {
				continue
			}
			value := scalar(k.value)
			if strings.ContainsFunc(value, isControl) {
				// net/http would write a NUL as it is, and a line break
				// as a space
				c.errorf(k.line, "%s holds a control character (a line break?): header values are one line", clipped(key))
				continue
			}
			s.headers = append(s.headers, HeaderOp{Name: name, Value: value})
		default:
			c.errorf(k.line, "unknown step key %s in step %s%s", clipped(key), quoted(s.name), naming.Suggest(key, stepKeys))
		}
	}

	if b := sec.block; b != nil {
		c.block(s, b)
	}
	if s.effect == "" {
		s.http = nil // checked above, but the step has no (declared) effect
	}
	return s
}

// untag reads the YAML tag a step key's value begins with: a step key's
// value is a YAML scalar (flow-file.md), which a tag makes something else
// than the text after it (`! 5` is a string, `!foo x` a value of a kind
// the compiler does not know). A tag the value has without it (!!str on a
// string key, !!int on a whole-number key, either on response_status) is
// dropped from k.value; any other is refused, naming it, as the front
// matter refuses it. when: is not read here: it is an expression, in
// which ! is the negation. false when the value is refused.
func (c *compiler) untag(k *rawKey) bool {
	v := strings.TrimSpace(k.value)
	if !strings.HasPrefix(v, "!") {
		return true
	}
	end := strings.IndexAny(v, " \t")
	if strings.HasPrefix(v, "!<") {
		end = strings.IndexByte(v, '>') + 1 // a verbatim tag holds no blank
	}
	if end <= 0 {
		end = len(v)
	}
	tag := v[:end]
	if t, ok := strings.CutPrefix(tag, "!<tag:yaml.org,2002:"); ok && strings.HasSuffix(t, ">") {
		tag = "!!" + strings.TrimSuffix(t, ">") // !<tag:yaml.org,2002:str> is !!str
	}
	kind, taken := "a string", []string{"!!str"}
	switch {
	case k.key == "queue" || k.key == "save_body":
		kind = "a name"
	case strings.HasSuffix(k.key, "_ms"):
		kind, taken = "a whole number", []string{"!!int"}
	case k.key == "response_status" || k.key == "fault_status":
		kind, taken = "a status code from 100 to 599 or a {{ }} template", []string{"!!int", "!!str"}
	}
	if !slices.Contains(taken, tag) {
		c.errorf(k.line, "%s must be %s, not a value tagged %s", clipped(k.key), kind, clipped(tag))
		return false
	}
	k.value = strings.TrimSpace(v[end:])
	return true
}

var stepKeys = []string{
	"effects", "endpoint", "method", "headers", "read_timeout_ms", "connect_timeout_ms",
	"queue", "save_body", "when", "response_status", "response_header_remove", "fault_status",
}

// isHeaderKey reports whether key sets or removes a response header.
func isHeaderKey(key string) bool {
	return key == "response_header_remove" || strings.HasPrefix(key, "response_header_") || strings.HasPrefix(key, "fault_header_")
}

// isStepKey reports whether key is one of the step keys (to catch keys
// written away from the heading).
func isStepKey(key string) bool {
	return slices.Contains(stepKeys, key) || strings.HasPrefix(key, "response_header_") || strings.HasPrefix(key, "fault_header_")
}

var (
	ctxName     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	reservedCtx = map[string]bool{
		"input": true, "correlation_id": true, "tenant": true, "flow": true, "version": true,
		"door": true, "attempt": true, "HTTP_SC": true, "HTTP_RESPONSE_BODY": true, "HTTP_RESPONSE_HEADERS": true,
	}
	methods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}
)

func (c *compiler) httpKey(s *Step, k rawKey) {
	h := s.http
	switch k.key {
	case "endpoint":
		t, err := CompileTemplate(scalar(k.value))
		if err != nil {
			c.errorf(k.line, "endpoint: %s", err)
			return
		}
		if msg := checkEndpoint(t); msg != "" {
			c.errorf(k.line, "endpoint %s %s", quoted(shownEndpoint(t.src)), msg)
			return
		}
		h.Endpoint = t
	case "method":
		m := strings.ToUpper(scalar(k.value))
		if !slices.Contains(methods, m) {
			c.errorf(k.line, "method %s is not one of %s", quoted(scalar(k.value)), strings.Join(methods, ", "))
			return
		}
		h.Method = m
	case "headers":
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(k.value), &n); err != nil || len(n.Content) == 0 || n.Content[0].Kind != yaml.MappingNode {
			c.errorf(k.line, "headers must be a JSON object of names to values, e.g. {\"Idempotency-Key\": \"{{ ctx.correlation_id }}\"}")
			return
		}
		m := n.Content[0]
		lineerr.MarkNonSpecificTags(m, strings.Split(k.value, "\n"))
		if lineerr.Tagged(m) {
			c.errorf(k.line, "headers must be a JSON object of names to values, not a value tagged %s", clipped(m.Tag))
			return
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(m.Content); i += 2 {
			name, val := m.Content[i].Value, m.Content[i+1]
			if lineerr.Tagged(m.Content[i]) {
				c.errorf(k.line, "headers: the header name %s must be a string, not a value tagged %s", clipped(name), clipped(m.Content[i].Tag))
				continue
			}
			if err := CheckHeaderName(name); err != nil {
				c.errorf(k.line, "headers: %s", err)
				continue
			}
			// a name of an object, not a step key: its underscores are kept
			// (X_Api_Key is not X-Api-Key), so the name checked is the name sent
			canon := textproto.CanonicalMIMEHeaderKey(name)
			if seen[canon] {
				c.errorf(k.line, "headers sets %s twice", clipped(canon))
				continue
			}
			seen[canon] = true
			if lineerr.Tagged(val) {
				c.errorf(k.line, "headers: the value of %s must be a string, not a value tagged %s", clipped(name), clipped(val.Tag))
				continue
			}
			if val.Kind != yaml.ScalarNode || val.Tag == "!!null" {
				c.errorf(k.line, "headers: the value of %s must be a string", clipped(name))
				continue
			}
			t, err := CompileTemplate(val.Value)
			if err != nil {
				c.errorf(k.line, "headers: %s: %s", clipped(name), err)
				continue
			}
			if t.literalHas(isControl) {
				// net/http would refuse it on every call
				c.errorf(k.line, "headers: the value of %s holds a control character (a line break?): header values are one line", clipped(name))
				continue
			}
			h.Headers = append(h.Headers, HeaderTemplate{Name: canon, Value: t})
		}
	case "read_timeout_ms", "connect_timeout_ms":
		n, err := strconv.ParseInt(scalar(k.value), 10, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			// 0x3, 0o17, 0b101, 1_000: the forms YAML reads as integers
			// in the front matter, refused below as they are there
			if m, err0 := strconv.ParseInt(scalar(k.value), 0, 64); err0 == nil || errors.Is(err0, strconv.ErrRange) {
				n, err = m, err0
			}
		}
		below := err == nil && n < 1 || errors.Is(err, strconv.ErrRange) && n < 0
		if err != nil && !below {
			// -0.5, 0.0, -1e400: below the least, as the front matter
			// says of them, before saying they are not whole
			x, ferr := strconv.ParseFloat(scalar(k.value), 64)
			below = (ferr == nil || errors.Is(ferr, strconv.ErrRange)) && x < 1 && !math.IsInf(x, 1) &&
				strings.ContainsAny(scalar(k.value), "0123456789")
		}
		switch {
		case below:
			c.errorf(k.line, "%s must be at least 1, not %s", k.key, clipped(k.value))
			return
		case err == nil && !lineerr.PlainWhole(scalar(k.value)):
			// 0500 or +500: front matter refuses these (YAML reads 0500
			// as octal); a step key says the number as it is read
			c.errorf(k.line, "%s", lineerr.NotPlainWhole(k.key, n, k.value))
			return
		case err != nil && !errors.Is(err, strconv.ErrRange):
			c.errorf(k.line, "%s must be a whole number of milliseconds, not %s", k.key, quoted(k.value))
			return
		case err != nil || n > maxMillis:
			c.errorf(k.line, "%s %s is too large: at most %d (about 31 years)", k.key, clipped(k.value), int64(maxMillis))
			return
		}
		if k.key == "read_timeout_ms" {
			h.ReadTimeout = time.Duration(n) * time.Millisecond
		} else {
			h.ConnectTimeout = time.Duration(n) * time.Millisecond
		}
	}
}

func (c *compiler) status(s *Step, k rawKey) {
	v := scalar(k.value)
	if strings.Contains(v, "{{") {
		t, err := CompileTemplate(v)
		if err != nil {
			c.errorf(k.line, "%s: %s", k.key, err)
			return
		}
		s.status = &Status{Template: t}
		return
	}
	n, ok := ParseStatus(v)
	switch {
	case !lineerr.PlainWhole(v):
		c.errorf(k.line, "%s must be a status code from 100 to 599 or a {{ }} template, not %s", k.key, quoted(v))
		return
	case !ok:
		c.errorf(k.line, "%s %s is not a status code: use 100 to 599", k.key, clipped(v))
		return
	}
	s.status = &Status{Code: n}
}

func (c *compiler) block(s *Step, b *rawBlock) {
	first := b.line + 1
	switch b.info {
	case "ntd":
		if strings.TrimSpace(b.body) == "" {
			c.errorf(b.line, "step %s: the ntd block is empty: write the JSON document to produce", quoted(s.name))
			return
		}
		t, err := CompileNTD(b.body)
		if err != nil {
			for _, te := range templateErrors(err) {
				c.errorf(first+te.Line, "step %s: %s", quoted(s.name), te.Msg)
			}
			return
		}
		s.block, s.ntd = BlockNTD, t
	case "condition":
		var parts []string
		at := first // the expression's first line, past comments
		for i, l := range strings.Split(b.body, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				if parts == nil {
					at = first + i
				}
				parts = append(parts, t)
			}
		}
		if len(parts) == 0 {
			c.errorf(b.line, "step %s: the condition block is empty: write one expression", quoted(s.name))
			return
		}
		e, err := CompileExpr(strings.Join(parts, " "))
		if parses(err) {
			c.errorf(at, "step %s: condition: %s", quoted(s.name), err)
			return
		}
		if err != nil {
			c.errorf(at, "step %s: condition does not parse: %s", quoted(s.name), err)
			return
		}
		if err := e.neverBoolean("condition"); err != nil {
			c.errorf(at, "step %s: %s", quoted(s.name), err)
			return
		}
		s.block, s.condition = BlockCondition, e
	case "validate":
		for i, l := range strings.Split(b.body, "\n") {
			t := strings.TrimSpace(l)
			if t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			r, err := parseRule(t)
			if err != nil {
				c.errorf(first+i, "step %s: %s", quoted(s.name), err)
				continue
			}
			r.Line = first + i
			s.rules = append(s.rules, r)
		}
		if len(s.rules) == 0 && !c.hasErrorAfter(b.line) {
			c.errorf(b.line, "step %s: the validate block has no rules: write EXPRESSION | \"MESSAGE\" | KIND lines", quoted(s.name))
			return
		}
		s.block = BlockValidate
	}
}

func (c *compiler) hasErrorAfter(line int) bool {
	for _, e := range c.errs {
		if e.Line > line {
			return true
		}
	}
	return false
}

// parseRule reads `EXPRESSION | "MESSAGE" | KIND` (KIND optional).
func parseRule(line string) (Rule, error) {
	seps := ruleSeparators(line)
	if len(seps) == 0 {
		return Rule{}, fmt.Errorf("the validate rule has no message: write EXPRESSION | \"MESSAGE\" | KIND")
	}
	if len(seps) > 2 {
		return Rule{}, fmt.Errorf("a validate rule is EXPRESSION | \"MESSAGE\" | KIND (KIND syntactic or semantic, default semantic)")
	}
	exprSrc := strings.TrimSpace(line[:seps[0]])
	msgEnd := len(line)
	if len(seps) == 2 {
		msgEnd = seps[1]
	}
	msgSrc := strings.TrimSpace(line[seps[0]+1 : msgEnd])
	r := Rule{Kind: Semantic}
	if len(seps) == 2 {
		switch kind := strings.TrimSpace(line[seps[1]+1:]); kind {
		case "semantic":
		case "syntactic":
			r.Kind = Syntactic
		default:
			return Rule{}, fmt.Errorf("validate rule kind %s is not syntactic or semantic", quoted(kind))
		}
	}
	msg, err := ParseJSON([]byte(msgSrc), 1)
	if s, ok := msg.(string); err != nil || !ok {
		return Rule{}, fmt.Errorf("the message of a validate rule is a double-quoted string, not %s", clipped(msgSrc))
	} else if s == "" {
		return Rule{}, fmt.Errorf("the message of a validate rule is empty: say what is wrong")
	} else {
		r.Message = s
	}
	if exprSrc == "" {
		return Rule{}, fmt.Errorf("the validate rule has no expression before |")
	}
	e, err := CompileExpr(exprSrc)
	if parses(err) {
		return Rule{}, fmt.Errorf("validate expression: %s", err)
	}
	if err != nil {
		return Rule{}, fmt.Errorf("validate expression does not parse: %s", err)
	}
	if err := e.neverBoolean("validate expression"); err != nil {
		return Rule{}, err
	}
	r.Expr = e
	return r, nil
}

// ruleSeparators returns the offsets of the single | characters of a rule
// line, outside string literals (|| is the or operator).
func ruleSeparators(line string) []int {
	var seps []int
	inString := false
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case inString && ch == '\\':
			i++
		case ch == '"':
			inString = !inString
		case !inString && ch == '|':
			if i+1 < len(line) && line[i+1] == '|' {
				i++
				continue
			}
			seps = append(seps, i)
		}
	}
	return seps
}

// checkEndpoint returns why an endpoint is not an absolute http(s) URL, or
// "" when it is. Holes are judged by a placeholder.
func checkEndpoint(t *Template) string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.expr != nil {
			b.WriteString("x")
		} else {
			b.WriteString(p.lit)
		}
	}
	u := b.String()
	lower := strings.ToLower(u)
	if !strings.HasPrefix(lower, "http://") && !strings.HasPrefix(lower, "https://") {
		return "is not an absolute http:// or https:// URL"
	}
	if host := u[strings.Index(u, "://")+3:]; host == "" || strings.IndexAny(host, "/?#") == 0 {
		return "names no host"
	}
	if first := t.parts[0]; first.expr != nil || !strings.ContainsAny(first.lit[strings.Index(first.lit, "://")+3:], "/?#") && len(t.parts) > 1 {
		return "must name its host literally: holes belong in the path or the query"
	}
	if strings.ContainsAny(u, " \t") {
		return "contains a space: percent-encode it"
	}
	if seg, ok := dotSegment(u); ok {
		return "has the path segment " + quoted(seg) + ", which names another resource: write the path it means"
	}
	pu, err := url.Parse(u)
	if err != nil {
		// what every call would fail on at run time
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if shown := shownEndpoint(u); shown != u && strings.Contains(shown, "redacted@") && strings.Contains(err.Error(), `"`) {
			// Go's cause quotes a piece of the URL, which may be of the
			// password (https://user:pa/ss@host: invalid port ":pa")
			return "does not parse; in a user name or password, write '#', '%', '/', '?' and '@' percent-encoded (%23, %25, %2F, %3F, %40)"
		}
		return "does not parse: " + err.Error()
	}
	if p := pu.Port(); p != "" {
		// url.Parse takes any digits: every call would fail to dial
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "has the port " + p + ": a port is 1 to 65535"
		}
	}
	return ""
}

// shownEndpoint is an endpoint as a compile error quotes it: its user
// information, query and fragment, where a downstream's password and API
// key live, show as "redacted", as a failed call's error leaves them out
// (the errors of a refused commit go to the log, GET /status and the
// registry, which the config repo's readers are not alone to see). Up to
// the last '@' outside the holes is taken for user information: a
// password may hold an unescaped '/', '?' or '#', and a hole (whose
// expression may hold an '@' of its own).
func shownEndpoint(src string) string {
	scheme, rest := "", src
	if i := strings.Index(rest, "://"); i >= 0 {
		scheme, rest = rest[:i+3], rest[i+3:]
	}
	at := -1
	for i := 0; i < len(rest); i++ {
		switch {
		case strings.HasPrefix(rest[i:], "{{"):
			end := holeEnd(rest[i:])
			if end < 0 {
				i = len(rest)
				break
			}
			i += end + 1
		case rest[i] == '@':
			at = i
		}
	}
	if at >= 0 {
		rest = "redacted@" + rest[at+1:]
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i+1] + "redacted"
	}
	return scheme + rest
}

// isControl reports a character a header value cannot hold: a control
// character other than a tab.
func isControl(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }

// scalar reads a step key's value as one string: a quoted YAML string is
// unquoted, anything else is taken as written. A value that only begins
// and ends with quotes ("urgent" in $.tags && $.p == "high") is taken as
// written: YAML would read its first string and drop the rest.
func scalar(v string) string {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && quoteEnd(v) == len(v)-1 {
		var s string
		if err := yaml.Unmarshal([]byte(v), &s); err == nil {
			return s
		}
	}
	return v
}

// quoteEnd is the index of the quote that closes the quoted string v
// begins with, or -1.
func quoteEnd(v string) int {
	q := v[0]
	for i := 1; i < len(v); i++ {
		switch {
		case q == '"' && v[i] == '\\':
			i++
		case v[i] == q && q == '\'' && i+1 < len(v) && v[i+1] == '\'':
			i++ // '' is a quote inside a single-quoted string
		case v[i] == q:
			return i
		}
	}
	return -1
}

// stepList reads a flow list value ([a, b]) of a step key. A tag on the
// list or an entry (`!foo [a]`, `[! a]`) is refused, as in the front
// matter.
func (c *compiler) stepList(k rawKey, s *Step) ([]string, bool) {
	var n yaml.Node
	err := yaml.Unmarshal([]byte(k.value), &n)
	if err != nil || len(n.Content) == 0 || n.Content[0].Kind != yaml.SequenceNode {
		c.errorf(k.line, "%s of step %s must be a list, e.g. [%s]", k.key, quoted(s.name), exampleFor(k.key))
		return nil, false
	}
	list := n.Content[0]
	lineerr.MarkNonSpecificTags(list, strings.Split(k.value, "\n"))
	if lineerr.Tagged(list) {
		c.errorf(k.line, "%s of step %s must be a list, e.g. [%s], not a value tagged %s", k.key, quoted(s.name), exampleFor(k.key), clipped(list.Tag))
		return nil, false
	}
	var out []string
	for _, e := range list.Content {
		if lineerr.Tagged(e) {
			c.errorf(k.line, "%s of step %s must be a list of names, not a value tagged %s", k.key, quoted(s.name), clipped(e.Tag))
			return nil, false
		}
		if e.Kind != yaml.ScalarNode || e.Tag == "!!null" {
			c.errorf(k.line, "%s of step %s must be a list of names", k.key, quoted(s.name))
			return nil, false
		}
		out = append(out, e.Value)
	}
	return out, true
}

func exampleFor(key string) string {
	if key == "effects" {
		return "http_egress"
	}
	return "x-internal, x-ephemeral"
}

func (c *compiler) effectList(line int, key string, v *yaml.Node) []Effect {
	if lineerr.Tagged(v) {
		c.errorf(line, "effects must be a list, e.g. [http_egress], not a value tagged %s", clipped(v.Tag))
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		c.errorf(line, "effects must be a list, e.g. [http_egress], not %s", lineerr.Describe(v))
		return nil
	}
	var out []Effect
	for _, e := range v.Content {
		switch eff := Effect(e.Value); {
		case lineerr.Tagged(e):
			c.errorf(line, "effects must be a list of effect names, not a value tagged %s", clipped(e.Tag))
		case e.Kind != yaml.ScalarNode:
			c.errorf(line, "effects must be a list of effect names")
		case eff == EffectHTTPEgress || eff == EffectQueuePublish:
			out = append(out, eff)
		default:
			c.errorf(line, "unknown effect %s: effects are http_egress and queue_publish", quoted(e.Value))
		}
	}
	return out
}

// str reads a key whose value is a string (description, schedule,
// dedup_key…): a scalar YAML reads as a string, or a date written plainly
// (2026-01-01, the text as written). A number (5, 0x10, and 1e400 or
// 0x1ffffffffffffffff, which YAML reads as a string), a boolean, an empty
// value, a list, a mapping and a value with a tag other than !!str are
// refused, as a number key refuses a string.
func (c *compiler) str(line int, key string, v *yaml.Node) (string, bool) {
	switch {
	case lineerr.PastFloat(v) || isPast64Bits(v):
		c.errorf(line, "%s must be a string, not the number %s", key, clipped(v.Value))
		return "", false
	case v.Kind == yaml.ScalarNode && v.Tag != "!!str" && v.Style&yaml.TaggedStyle != 0:
		c.errorf(line, "%s must be a string, not a value tagged %s", key, clipped(v.Tag))
		return "", false
	case v.Kind != yaml.ScalarNode || v.Tag != "!!str" && v.Tag != "!!timestamp":
		c.errorf(line, "%s must be a string, not %s", key, lineerr.Describe(v))
		return "", false
	}
	return v.Value, true
}

// maxMillis bounds every whole-number key (milliseconds, bytes) but
// queue_max_attempts (maxAttempts), so that no value overflows a
// time.Duration: about 31 years.
const maxMillis = 1e12

// maxAttempts bounds queue_max_attempts: a queue keeps the attempt number
// as a uint32 in a retry's record and in a dead letter's (queue.MaxAttempts).
// The key was bounded at maxMillis, and a worker's attempt 2^32 was written
// as attempt 0. (A 32-bit build's int holds less: the bound is then
// math.MaxInt32, so that Retry's int keeps the value.)
const maxAttempts = min(math.MaxUint32, math.MaxInt)

// integer reads a whole-number key of at least min and at most max.
// A number written plainly past what an int64 or a float64 holds
// (99999999999999999999, 1e400, 0x1ffffffffffffffff) is too large, or
// below min when negative: YAML reads it as a float or a string, and the
// error said "must be a whole number" of a whole number, or "not the
// string".
func (c *compiler) integer(line int, key string, v *yaml.Node, min, max int64) (int64, bool) {
	var n int64
	if belowLeast(v, float64(min)) {
		c.errorf(line, "%s must be at least %d, not %s", key, min, clipped(v.Value))
		return 0, false
	}
	if lineerr.PastInt(v) || lineerr.PastFloat(v) || isPast64Bits(v) {
		switch msg := lineerr.LeadingZero(key, v); {
		case msg != "":
			// 0777… past an int64, which YAML reads as a float: a
			// leading zero, as 010 is, not a number that is not whole
			c.errorf(line, "%s", msg)
		default:
			c.errorf(line, "%s %s is too large: at most %d", key, clipped(v.Value), max)
		}
		return 0, false
	}
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
		c.errorf(line, "%s must be a whole number, not %s", key, lineerr.Describe(v))
		return 0, false
	}
	if msg := lineerr.LeadingZero(key, v); msg != "" {
		c.errorf(line, "%s", msg)
		return 0, false
	}
	if err := v.Decode(&n); err != nil {
		c.errorf(line, "%s %s is too large: at most %d", key, clipped(v.Value), max)
		return 0, false
	}
	if !lineerr.PlainWhole(v.Value) {
		// +500, 0x3, 1_000, 0o17: YAML reads them as integers, a step
		// key refuses them, and a reader may not see the number YAML does
		c.errorf(line, "%s", lineerr.NotPlainWhole(key, n, v.Value))
		return 0, false
	}
	if n > max {
		c.errorf(line, "%s %d is too large: at most %d", key, n, max)
		return 0, false
	}
	return n, true
}

// number reads a number key of at least min, written plainly (2, 1.5,
// 2e0; not +2, 0x3, 1_000 or 2., which YAML reads as numbers too). One
// written plainly past float64's range (1e400) is too large, or below min
// when negative: YAML reads it as a string, and the error said "not the
// string".
func (c *compiler) number(line int, key string, v *yaml.Node, min float64) (float64, bool) {
	var x float64
	if belowLeast(v, min) {
		c.errorf(line, "%s must be at least %s, not %s", key, strconv.FormatFloat(min, 'f', 1, 64), clipped(v.Value))
		return 0, false
	}
	if lineerr.PastFloat(v) {
		c.errorf(line, "%s %s is too large: at most %g", key, clipped(v.Value), math.MaxFloat64)
		return 0, false
	}
	if n, ok := lineerr.Past64Bits(v); ok {
		// 0x1ffffffffffffffff: YAML reads it as a string
		if x, _ := new(big.Float).SetInt(n).Float64(); !math.IsInf(x, 0) {
			c.errorf(line, "%s", lineerr.NotPlainNumber(key, x, v.Value))
		} else {
			c.errorf(line, "%s %s is too large: at most %g", key, clipped(v.Value), math.MaxFloat64)
		}
		return 0, false
	}
	if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") {
		c.errorf(line, "%s must be a number, not %s", key, lineerr.Describe(v))
		return 0, false
	}
	if v.Tag == "!!int" {
		// 010: YAML reads it as octal 8, as for a whole-number key
		if msg := lineerr.LeadingZero(key, v); msg != "" {
			c.errorf(line, "%s", msg)
			return 0, false
		}
	}
	if err := v.Decode(&x); err != nil {
		// !!float 0x1p3: YAML does not read a hex float, Go does
		y, perr := strconv.ParseFloat(v.Value, 64)
		if perr != nil || lineerr.PlainNumber(v.Value) {
			c.errorf(line, "%s must be a number, not %s", key, lineerr.Describe(v))
			return 0, false
		}
		x = y
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		// YAML's .inf and .nan are numbers to it
		c.errorf(line, "%s must be a finite number, not %s", key, clipped(v.Value))
		return 0, false
	}
	if x < min {
		// a form belowLeast does not read (!!float 0x1p-3)
		c.errorf(line, "%s must be at least %s, not %s", key, strconv.FormatFloat(min, 'f', 1, 64), clipped(v.Value))
		return 0, false
	}
	if !lineerr.PlainNumber(v.Value) {
		// +2, 0x3, 1_000, 2.: YAML reads them as numbers, a reader may
		// not see the number YAML does
		c.errorf(line, "%s", lineerr.NotPlainNumber(key, x, v.Value))
		return 0, false
	}
	return x, true
}

// belowLeast reports whether v is a number below min, in whatever form
// YAML reads as a number (-5, -0x5, -1_0, -05, -0.5, +0, 0x0, and -1e400
// or -99999999999999999999 past what a float64 or an int64 holds): every
// number key refuses one as "must be at least min, not <as written>",
// since the least is what to mend, before saying how it is written. A
// string ("-5" quoted), an infinity or NaN is not.
func belowLeast(v *yaml.Node, min float64) bool {
	if lineerr.PastInt(v) || lineerr.PastFloat(v) || isPast64Bits(v) {
		return strings.HasPrefix(v.Value, "-")
	}
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" && v.Tag != "!!float" {
		return false
	}
	var x float64
	if err := v.Decode(&x); err != nil {
		return false
	}
	return !math.IsInf(x, 0) && x < min
}

func isScalar(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag != "!!null" }

func nodeText(n *yaml.Node) string {
	if n == nil || !isScalar(n) {
		return ""
	}
	return n.Value
}

// maxScheduleInput bounds schedule_input, in bytes of JSON: a cron tick's
// message, which a queue's frame holds at about 1 MiB.
const maxScheduleInput = 1 << 20

// yamlBudget is what is left of the bytes of JSON a YAML value may make
// once its aliases are followed: a few hundred bytes of aliases, each
// naming the one before ten times, stand for 10^9 values.
type yamlBudget struct{ left int }

// spend takes n bytes from the budget, an error once it is spent.
func (b *yamlBudget) spend(n int) error {
	if b.left -= n; b.left < 0 {
		return errOverBudget
	}
	return nil
}

var errOverBudget = fmt.Errorf("schedule_input is over %d bytes as JSON (YAML aliases followed), more than a message holds", maxScheduleInput)

// nodeError is an error of one value of a YAML document, which names
// its line.
type nodeError struct {
	node *yaml.Node
	msg  string
}

func (e *nodeError) Error() string { return e.msg }

// nodeErrorf is an error of the value n.
func nodeErrorf(n *yaml.Node, format string, args ...any) error {
	return &nodeError{node: n, msg: fmt.Sprintf(format, args...)}
}

// tagError is the error of a value written with a YAML tag (!!str 5,
// !foo x), or nil: the document is JSON, which has no tags, and the value
// read without its tag is not what was written.
func tagError(n *yaml.Node) error {
	if n.Style&yaml.TaggedStyle == 0 {
		return nil
	}
	return nodeErrorf(n, "the YAML tag %s is not JSON: write the value without it (a string in quotes)", clipped(n.Tag))
}

// yamlDocument converts a YAML value into a document value, within budget
// (bytes of JSON, about: aliases are followed). It is JSON written as
// YAML: a YAML tag, and a number JSON does not write (0x10, 1_000, +5,
// .inf), are errors.
func yamlDocument(n *yaml.Node, budget *yamlBudget) (any, error) {
	if err := budget.spend(len(n.Value) + 2); err != nil {
		return nil, err
	}
	if err := tagError(n); err != nil {
		return nil, err
	}
	switch n.Kind {
	case yaml.MappingNode:
		obj := objectBuilder{keys: make([]string, 0, len(n.Content)/2), vals: make([]any, 0, len(n.Content)/2)}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, written := n.Content[i], n.Content[i]
			if k.Kind == yaml.AliasNode && k.Alias != nil {
				k = k.Alias // *k reads as the value &k names
			}
			if k.Kind != yaml.ScalarNode {
				// a complex key (? [a, b]) names no member: its Value is ""
				return nil, nodeErrorf(k, "a key is a string, not %s", lineerr.Describe(k))
			}
			if err := tagError(k); err != nil {
				return nil, err
			}
			if k.Tag == "!!merge" {
				// <<: *defaults would be a member named "<<"
				return nil, nodeErrorf(written, "YAML's merge key (<<) is not followed: write the keys it would merge")
			}
			if obj.find(k.Value) >= 0 {
				// on the line of the second, where the alias is (*k)
				return nil, nodeErrorf(written, "duplicate key %s", quoted(k.Value))
			}
			if err := budget.spend(len(k.Value) + 3); err != nil {
				return nil, err
			}
			v, err := yamlDocument(n.Content[i+1], budget)
			if err != nil {
				return nil, err
			}
			obj.add(k.Value, v)
		}
		return obj.object(), nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, e := range n.Content {
			v, err := yamlDocument(e, budget)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.ScalarNode:
		if lineerr.PastFloat(n) {
			// 1e400: a number to whoever wrote it, a string to YAML;
			// refused as a body's is
			_, err := ParseJSON([]byte(n.Value), 1)
			if je, ok := err.(*JSONError); ok && strings.HasSuffix(je.Msg, " is out of range") {
				return nil, nodeErrorf(n, "%s", je.Msg)
			}
			return nil, nodeErrorf(n, "the number %s is not a JSON number", clipped(n.Value))
		}
		if x, ok := lineerr.Past64Bits(n); ok {
			// 0x1ffffffffffffffff: a number to whoever wrote it, a
			// string to YAML; refused as 0x10 is
			if x.BitLen() <= maxPast64Bits {
				dec := x.String()
				if _, err := ParseJSON([]byte(dec), 1); err == nil {
					return nil, nodeErrorf(n, "the number %s is not written as JSON writes numbers: write %s", clipped(n.Value), clipped(dec))
				}
			}
			return nil, nodeErrorf(n, "number %s is out of range", clipped(n.Value))
		}
		switch n.Tag {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			err := n.Decode(&b)
			return b, err
		case "!!int", "!!float":
			// a number JSON writes the same way (not 0x1F, 1_000 or
			// .inf) reads as a body's does: every digit kept
			v, err := ParseJSON([]byte(n.Value), 1)
			if err == nil {
				return v, nil
			}
			if je, ok := err.(*JSONError); ok && strings.HasSuffix(je.Msg, " is out of range") {
				// refused as a body's: 1e-1000000000 is not YAML's 0
				return nil, nodeErrorf(n, "%s", je.Msg)
			}
		}
		switch n.Tag {
		case "!!int":
			if msg := lineerr.LeadingZero("the number", n); msg != "" {
				// 017 is 15 to YAML, 17 to whoever wrote it (and no JSON
				// number): refused, as in the rest of the front matter
				return nil, nodeErrorf(n, "%s", msg)
			}
			var i int64
			if err := n.Decode(&i); err != nil {
				return nil, nodeErrorf(n, "the number %s is not a JSON number", clipped(n.Value))
			}
			// 0x10, 0o17, 0b11, 1_000, +5: YAML's, not JSON's
			return nil, nodeErrorf(n, "the number %s is not written as JSON writes numbers: write %d", clipped(n.Value), i)
		case "!!float":
			var f float64
			if err := n.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, nodeErrorf(n, "%s is not a JSON number", clipped(n.Value))
			}
			// .5, 1., +1.5, 1_000.5: YAML's, not JSON's
			return nil, nodeErrorf(n, "the number %s is not written as JSON writes numbers: write %s", clipped(n.Value), strconv.FormatFloat(f, 'g', -1, 64))
		}
		return n.Value, nil
	case yaml.AliasNode:
		if n.Alias != nil {
			return yamlDocument(n.Alias, budget)
		}
	}
	return nil, fmt.Errorf("unsupported YAML value")
}

// maxPast64Bits bounds the numbers lineerr.Past64Bits reads that are written in
// decimal to be checked against a body's range: past it (2^1030 is about
// 1.2e310), a number is out of that range, which ends near 1.8e308.
const maxPast64Bits = 1030

// isPast64Bits reports whether n is a number lineerr.Past64Bits reads.
func isPast64Bits(n *yaml.Node) bool {
	_, ok := lineerr.Past64Bits(n)
	return ok
}

var yamlLine = regexp.MustCompile(`^yaml: line \d+: `)

// yamlMessage is a YAML error without its prefix and line (which the YAML
// library counts from 0 or 1 depending on the error).
func yamlMessage(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return strings.TrimPrefix(yamlLine.ReplaceAllString(msg, ""), "yaml: ")
}

// yamlErrorLine finds the line (1-based) of a YAML text's error: the line
// after the longest prefix of whole lines that parses. (The first prefix
// that fails would blame a line that opens a mapping or a string the next
// lines close; yaml.v3's own line is often the construct's, not the
// error's.) The prefixes are tried from the end, within a budget of bytes
// parsed, so that a large text costs a few parses, not one per line; past
// the budget, yaml.v3's line (err's) is taken.
func yamlErrorLine(text string, err error) int {
	var ends []int // ends[k-1]: the end of the prefix of k lines
	for i := 0; i < len(text); i++ {
		if text[i] == '\n' {
			ends = append(ends, i)
		}
	}
	ends = append(ends, len(text))
	budget := 1 << 22
	var n yaml.Node
	for k := len(ends) - 1; k >= 0; k-- {
		end := 0
		if k > 0 {
			end = ends[k-1]
		}
		if budget -= end; budget < 0 {
			break
		}
		if yaml.Unmarshal([]byte(text[:end]), &n) == nil {
			return k + 1
		}
	}
	if m := yamlLineNumber.FindStringSubmatch(err.Error()); m != nil {
		if l, err := strconv.Atoi(m[1]); err == nil {
			return l
		}
	}
	return 1
}

var yamlLineNumber = regexp.MustCompile(`^yaml: line (\d+): `)

// nesting is how deep a document nests objects and arrays (a scalar is 0).
func nesting(v any) int {
	deepest := 0
	switch v := v.(type) {
	case *Object:
		for i := range v.Len() {
			_, x := v.Key(i)
			deepest = max(deepest, nesting(x))
		}
	case []any:
		for _, x := range v {
			deepest = max(deepest, nesting(x))
		}
	default:
		return 0
	}
	return deepest + 1
}
