package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/caarlos0/env/v11"

	"github.com/nexushq/nexus/access"
	"github.com/nexushq/nexus/engine"
	"github.com/nexushq/nexus/flow"
	"github.com/nexushq/nexus/gitsync"
	"github.com/nexushq/nexus/host"
	"github.com/nexushq/nexus/jsonlog"
	"github.com/nexushq/nexus/queue"
	"github.com/nexushq/nexus/registry"
	"github.com/nexushq/nexus/scheduler"
)

const serveUsage = `Usage: nexus serve [flags]

Runs the host: the /run door, git sync of the config repo, the operations
endpoints. Every flag has an environment variable; a flag wins over it.

  nexus serve --repo https://git.example.com/ops/flows.git --admin-key "$KEY"
  nexus serve --dev      # development: serves flows-example, see the README

Flags:
`

// serveConfig is the host's configuration: environment first, then flags.
type serveConfig struct {
	Listen           string        `env:"NEXUS_LISTEN" envDefault:":9090"`
	DB               string        `env:"NEXUS_DB" envDefault:"~/.nexus/registry.db"`
	Repo             string        `env:"NEXUS_REPO"`
	Branch           string        `env:"NEXUS_BRANCH" envDefault:"main"`
	FlowsDir         string        `env:"NEXUS_FLOWS_DIR" envDefault:"flows"`
	Poll             time.Duration `env:"NEXUS_POLL" envDefault:"10s"`
	Secret           string        `env:"NEXUS_SECRET"`
	AdminKey         string        `env:"NEXUS_ADMIN_KEY"`
	MaxBodyBytes     int64         `env:"NEXUS_MAX_BODY_BYTES" envDefault:"1048576"`
	MaxWorkers       int           `env:"NEXUS_MAX_WORKERS" envDefault:"256"`
	MaxRuns          int           `env:"NEXUS_MAX_RUNS" envDefault:"1024"`
	LogFormat        string        `env:"NEXUS_LOG_FORMAT" envDefault:"json"`
	JournalRetention time.Duration `env:"NEXUS_JOURNAL_RETENTION" envDefault:"168h"`
	JournalMax       int64         `env:"NEXUS_JOURNAL_MAX_ENTRIES" envDefault:"10000000"`
	SSHKey           string        `env:"NEXUS_SSH_KEY"`
	ShutdownGrace    time.Duration `env:"NEXUS_SHUTDOWN_GRACE" envDefault:"20s"`
	Dev              bool
	DevFlows         string
}

// exampleKey is the development key of flows-example/access.yaml (public:
// it is printed by the development mode and shown in the README).
const exampleKey = "nxk_example_acme_5f2c9d0e7b1a4c3d8e6f"

// serveFlags reads the host's configuration from the environment, and
// returns it with the flag set that overrides it (each flag's usage names
// its variable). The flag set is made even when a variable cannot be read,
// so that --help still works, and a setting whose variable cannot be read
// takes its default, which its flag may override; the problems say which
// variables could not be read.
func serveFlags() (*serveConfig, *flag.FlagSet, envProblems) {
	var cfg serveConfig
	var problems envProblems
	if err := env.Parse(&cfg); err != nil {
		var def serveConfig
		_ = env.ParseWithOptions(&def, env.Options{Environment: map[string]string{}}) // the defaults parse
		problems = envError(err, &cfg, &def)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "the `address` to listen on; 127.0.0.1:9090 with --dev unless given (env NEXUS_LISTEN)")
	fs.StringVar(&cfg.DB, "db", cfg.DB, "the registry `file`; the state directory is its folder (env NEXUS_DB)")
	fs.StringVar(&cfg.Repo, "repo", cfg.Repo, "the config repo: an https://, http://, ssh:// or file:// URL, or a local `path` (env NEXUS_REPO)")
	fs.StringVar(&cfg.Branch, "branch", cfg.Branch, "the `branch` to follow (env NEXUS_BRANCH)")
	fs.StringVar(&cfg.FlowsDir, "flows-dir", cfg.FlowsDir, "the `folder` of the repo holding the flows (env NEXUS_FLOWS_DIR)")
	fs.DurationVar(&cfg.Poll, "poll", cfg.Poll, "the `interval` between fetches of the repo (env NEXUS_POLL)")
	fs.StringVar(&cfg.Secret, "secret", cfg.Secret, "signing `secrets`, comma-separated while rotating; every door then requires a signature (env NEXUS_SECRET)")
	fs.StringVar(&cfg.AdminKey, "admin-key", cfg.AdminKey, "the admin `key` of /status, the management API and the UI; none closes them (env NEXUS_ADMIN_KEY)")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", cfg.MaxBodyBytes, "the message-size ceiling, in `bytes`, of flows that set none (env NEXUS_MAX_BODY_BYTES)")
	fs.IntVar(&cfg.MaxWorkers, "max-workers", cfg.MaxWorkers, "the residency budget: the most queues (`N`) with a worker in this process (env NEXUS_MAX_WORKERS)")
	fs.IntVar(&cfg.MaxRuns, "max-runs", cfg.MaxRuns, "the most /run executions (`N`) in progress at once, one more answered 503; 0 sets no limit (env NEXUS_MAX_RUNS)")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "the log's `format`: json or text; text when stderr is a terminal unless given (env NEXUS_LOG_FORMAT)")
	fs.DurationVar(&cfg.JournalRetention, "journal-retention", cfg.JournalRetention, "how long (a `duration`) journal entries are kept: 0 keeps them forever, otherwise at least 1m (env NEXUS_JOURNAL_RETENTION)")
	fs.Int64Var(&cfg.JournalMax, "journal-max-entries", cfg.JournalMax, "the most journal entries (`N`) kept, the oldest deleted first whatever the retention; 0 keeps any number (env NEXUS_JOURNAL_MAX_ENTRIES)")
	fs.StringVar(&cfg.SSHKey, "ssh-key", cfg.SSHKey, "a private key `file` for an ssh:// repo; default the ssh agent (env NEXUS_SSH_KEY)")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", cfg.ShutdownGrace, "the `duration` a shutdown lets the requests and deliveries in flight run; keep it 5s or more under the time your orchestrator waits before it kills (env NEXUS_SHUTDOWN_GRACE)")
	fs.BoolVar(&cfg.Dev, "dev", false, "development mode: serve the folder --dev-flows through a local git repo beside the registry (./.nexus-dev unless --db says otherwise)")
	fs.StringVar(&cfg.DevFlows, "dev-flows", "flows-example", "the config repo `folder` the development mode serves")
	return &cfg, fs, problems
}

// envProblem is a variable env.Parse could not read: its flag (which, when
// given, overrides it) and what to say, in the operator's terms.
type envProblem struct{ flag, msg string }

// envProblems are the variables that could not be read.
type envProblems []envProblem

// unlessGiven returns the problems of the variables whose flag was not
// given (set), as one error; nil when there are none.
func (ps envProblems) unlessGiven(set map[string]bool) error {
	var lines []string
	for _, p := range ps {
		if p.flag == "" || !set[p.flag] {
			lines = append(lines, p.msg)
		}
	}
	if len(lines) == 0 {
		return nil
	}
	return errors.New(strings.Join(lines, "; "))
}

// envError turns env.Parse's error into problems: for each variable that
// could not be read, its name, its value and what it takes (not the Go
// field and type it fills). Each such field of cfg takes its default,
// from def.
func envError(err error, cfg, def *serveConfig) envProblems {
	errs := []error{err}
	var agg env.AggregateError
	if errors.As(err, &agg) {
		errs = agg.Errors
	}
	problems := make(envProblems, 0, len(errs))
	for _, e := range errs {
		var pe env.ParseError
		if !errors.As(e, &pe) {
			problems = append(problems, envProblem{msg: e.Error()})
			continue
		}
		f, ok := reflect.TypeFor[serveConfig]().FieldByName(pe.Name)
		if !ok || f.Tag.Get("env") == "" {
			problems = append(problems, envProblem{msg: e.Error()})
			continue
		}
		reflect.ValueOf(cfg).Elem().FieldByIndex(f.Index).Set(reflect.ValueOf(def).Elem().FieldByIndex(f.Index))
		name := f.Tag.Get("env")
		msg := fmt.Sprintf("%s=%q is not %s", name, os.Getenv(name), valueWanted(pe.Type))
		if errors.Is(pe.Err, strconv.ErrRange) {
			msg = fmt.Sprintf("%s=%q is out of range", name, os.Getenv(name)) // as the flag says it
		}
		problems = append(problems, envProblem{
			flag: strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, "NEXUS_")), "_", "-"),
			msg:  msg,
		})
	}
	return problems
}

// valueWanted says, in the operator's terms, what a setting of type t
// takes: "a duration (such as 10s, 5m or 168h)", not the Go type.
func valueWanted(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "a duration (such as 10s, 5m or 168h)"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "a whole number"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "a number"
	case t.Kind() == reflect.Bool:
		return "true or false"
	}
	return "a " + t.String()
}

// settingName names where a setting's value came from: its flag when the
// flag was given, else its variable when that is set, else the flag.
func settingName(set map[string]bool, flagName string) string {
	if !set[flagName] {
		v := envName(flagName)
		if os.Getenv(v) != "" {
			return v
		}
	}
	return "--" + flagName
}

// envName is the variable of the setting of flagName (--max-runs:
// NEXUS_MAX_RUNS).
func envName(flagName string) string {
	return "NEXUS_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// givenOrInEnv says whether the setting of flagName was given on the
// command line or in its NEXUS_ variable.
func givenOrInEnv(set map[string]bool, flagName string) bool {
	return set[flagName] || strings.HasPrefix(settingName(set, flagName), "NEXUS_")
}

func runServe(args []string, stdout, stderr io.Writer) int {
	// the command's own lines echo what it was given (a flag, a path):
	// escaped as every command's are (the log escapes its own)
	refusal := terminalSafe{stderr}
	cfgp, fs, problems := serveFlags()
	rest, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		// run leaves serve's stdout as it is (see run): its usage checks
		// its own writes, as every other command's output is checked
		out := &outputWriter{w: terminalSafe{stdout}}
		printUsage(out, serveUsage, fs)
		if out.err != nil {
			fmt.Fprintf(refusal, "nexus serve: the output could not be written (%v)\n", out.err)
			return exitError
		}
		return exitOK
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := problems.unlessGiven(set); err != nil {
		fmt.Fprintf(refusal, "nexus serve: %v\n", err)
		return exitUsage
	}
	cfg := *cfgp // the flags parsed into it
	if err == nil {
		err = checkServeConfig(cfg, rest, set)
	}
	// blanks around the admin key are not part of it, as host.New takes it
	cfg.AdminKey = strings.TrimSpace(cfg.AdminKey)
	if err != nil {
		fmt.Fprintf(refusal, "nexus serve: %v\n", err)
		return exitUsage
	}
	if !givenOrInEnv(set, "log-format") && isTerminal(stderr) {
		// a person reads it (an empty NEXUS_LOG_FORMAT counts as not set)
		cfg.LogFormat = "text"
	}
	devDefaults(&cfg, set)
	if cfg.DB, err = expandHome(cfg.DB); err != nil {
		fmt.Fprintf(refusal, "nexus serve: %v\n", err)
		return exitError
	}

	// A log whose reader has gone (nexus serve | head -1, a log shipper
	// restarting) must not stop the host: with SIGPIPE notified, a write
	// to the broken pipe fails with EPIPE and the log writer drops its
	// lines; otherwise the Go runtime ended the process by SIGPIPE at the
	// first line written to stdout or stderr after.
	brokenPipes := make(chan os.Signal, 1)
	signal.Notify(brokenPipes, syscall.SIGPIPE)
	defer signal.Stop(brokenPipes)
	// the log's lines are written out in batches, off the request path
	logOut := newLogWriter(stderr, 1<<20, 2*time.Millisecond)
	defer logOut.Close()
	logger := newLogger(cfg.LogFormat, logOut)
	// What the standard library writes to Go's standard logger (net/http's
	// client says so of a backend's bytes after a 204, an unsolicited
	// response on an idle connection) is a line of this log, as the
	// server's ErrorLog is: written as Go's plain text, it was a line no
	// reader of the JSON log could read.
	prevLogOut, prevLogFlags := log.Writer(), log.Flags()
	log.SetFlags(0)
	log.SetOutput(slog.NewLogLogger(logger.Handler(), slog.LevelWarn).Writer())
	defer func() { log.SetOutput(prevLogOut); log.SetFlags(prevLogFlags) }()
	// An empty variable counts as not set, as for every setting; a key's
	// or a secret's, set and empty, is most likely a secret file found
	// empty: said at start (--dev makes its own admin key).
	for _, v := range []struct{ flag, closes string }{
		{"admin-key", "/status, the API and the UI are closed"},
		{"secret", "the doors take unsigned requests"},
	} {
		env := envName(v.flag)
		if val, ok := os.LookupEnv(env); ok && val == "" && !set[v.flag] && !(cfg.Dev && v.flag == "admin-key") {
			logger.Warn(fmt.Sprintf("%s is set and empty, which counts as not set: %s", env, v.closes), "event", "empty_setting", "setting", env)
		}
	}
	if setting := unusedSSHKey(cfg, set); setting != "" {
		logger.Warn(fmt.Sprintf("%s is for a repo fetched over ssh, and the repo is not: the key is not used", setting), "event", "unused_setting", "setting", setting)
	}
	// a hang-up from the terminal that runs it stops it; any other is
	// ignored (see stopOnSignal)
	ctx, stop := stopOnSignal(logger, logOut, isTerminal(stderr))
	defer stop()
	if err := serve(ctx, cfg, logger, stdout, stop); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			stop()
			// a SIGINT or SIGTERM before the host served (a large
			// registry loading, --dev committing its folder): the stop
			// asked for, not a failure (a rolling update that stopped a
			// starting pod read as a crash)
			logger.Info("nexus stopped before it served", "event", "stopped", "during", strings.TrimSuffix(err.Error(), ": "+context.Canceled.Error()))
			return exitOK
		}
		// one line, the command's: a failure while serving was logged
		// as it came (the listener's, event fatal), and one before the
		// host served is a refused start, said as every refusal is
		logOut.Close()
		fmt.Fprintf(refusal, "nexus serve: %v\n", err)
		return exitError
	}
	return exitOK
}

// unusedSSHKey names the ssh key setting (--ssh-key or NEXUS_SSH_KEY) when
// it is given for a repo that is not fetched over ssh, or "": it is not
// checked then (a NEXUS_SSH_KEY shared by hosts that follow repos over
// https and over ssh), but said, since a key given for nothing is most
// likely a repo URL that was meant to be ssh.
func unusedSSHKey(cfg serveConfig, set map[string]bool) string {
	if cfg.SSHKey == "" || cfg.Repo == "" || cfg.Dev || gitsync.UsesSSH(cfg.Repo) {
		return ""
	}
	return settingName(set, "ssh-key")
}

// devListen is where --dev listens unless told: the loopback only, since
// the example key it accepts for every acme flow is printed in the README
// (on every interface, anyone on the network could run the flows and fill
// the disk through /enqueue).
const devListen = "127.0.0.1:9090"

// devDefaults gives a --dev host the settings of development mode that
// were not given: its state directory and the loopback address.
func devDefaults(cfg *serveConfig, set map[string]bool) {
	if !cfg.Dev {
		return
	}
	if !givenOrInEnv(set, "db") {
		cfg.DB = filepath.Join(".nexus-dev", "registry.db")
	}
	if !givenOrInEnv(set, "listen") {
		cfg.Listen = devListen
	}
}

// stopOnSignal returns a context cancelled by the first SIGINT or SIGTERM,
// which begins the graceful shutdown. A second one stops the process at
// once, by that signal, without waiting for the requests and deliveries in
// flight (which a shutdown may wait for up to --shutdown-grace, then the
// workers' own grace): what was acknowledged is durable, and what was in
// flight is delivered again at the next start, as after a kill -9.
//
// SIGHUP's default action, an exit on the spot, cut the requests in flight.
// With hupStops (the log goes to a terminal: a person runs the host, and
// closing the terminal hangs it up) it begins the graceful shutdown, as
// SIGTERM does; otherwise it is logged and ignored: nexus serve has nothing
// to reload (the flows come from git, the log goes to stderr), and a
// logrotate hook or a supervisor's reload must not stop it. stop ends the
// watch; it may be called more than once. Once it has returned, no second
// signal is said: the caller logs that the process stopped after it (a
// signal after it ends the process by its default action, silently); one
// being handled when it is called makes it wait for the end of the
// process, so that "stopping at once" is never logged after the stop.
func stopOnSignal(logger *slog.Logger, logOut io.Closer, hupStops bool) (ctx context.Context, stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var mu sync.Mutex
	finished := false // stop was called: the shutdown is over
	go func() {
	first:
		for {
			select {
			case <-sigs:
				cancel()
				break first
			case <-hups:
				if hupStops {
					cancel()
					break first
				}
				// logged beside: a log that takes no more lines must not
				// keep this goroutine from seeing a SIGINT or SIGTERM
				go logger.Warn("SIGHUP ignored: nexus serve has nothing to reload (the flows come from git); SIGINT or SIGTERM stops it", "event", "signal_ignored", "signal", "hangup")
			case <-done:
				return
			}
		}
		select {
		case sig := <-sigs:
			mu.Lock()
			if finished {
				// the shutdown is over, and said so: nothing is left to
				// stop at once
				mu.Unlock()
				return
			}
			// mu stays held: the process ends here, and a shutdown
			// finishing meanwhile waits in stop rather than logging that
			// it stopped
			// the buffered log is written out if it can be: a destination
			// that takes no more lines (a stuck collector, a full pipe)
			// must not keep the process from stopping
			flushed := make(chan struct{})
			go func() {
				logger.Warn("a second signal: stopping at once, without waiting for what is in flight", "event", "stopping", "signal", sig.String())
				logOut.Close()
				close(flushed)
			}()
			select {
			case <-flushed:
			case <-time.After(secondSignalLogWait):
			}
			signal.Reset(sig)
			if s, ok := sig.(syscall.Signal); ok {
				syscall.Kill(os.Getpid(), s)
			}
			time.Sleep(time.Second) // the signal's default action ends the process
			os.Exit(exitError)
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			mu.Lock()
			finished = true
			mu.Unlock()
			signal.Stop(sigs)
			signal.Stop(hups)
			close(done)
			cancel()
		})
	}
}

// secondSignalLogWait is how long a second signal waits for the log to be
// written out before it ends the process.
const secondSignalLogWait = time.Second

// checkServeConfig refuses a configuration nexus serve cannot run with,
// before anything is made on disk; set holds the flags given, so that an
// error names the setting as the operator wrote it (--poll or NEXUS_POLL).
func checkServeConfig(cfg serveConfig, rest []string, set map[string]bool) error {
	name := func(flagName string) string { return settingName(set, flagName) }
	switch {
	case len(rest) > 0:
		return fmt.Errorf("unexpected argument %q", rest[0])
	case cfg.LogFormat != "json" && cfg.LogFormat != "text":
		return fmt.Errorf("%s must be json or text, not %q", name("log-format"), cfg.LogFormat)
	case cfg.Poll < 100*time.Millisecond:
		return fmt.Errorf("%s must be at least 100ms, not %s", name("poll"), cfg.Poll)
	case cfg.MaxBodyBytes < 1:
		return fmt.Errorf("%s must be at least 1, not %d", name("max-body-bytes"), cfg.MaxBodyBytes)
	case cfg.MaxWorkers < 1:
		return fmt.Errorf("%s must be at least 1, not %d", name("max-workers"), cfg.MaxWorkers)
	case cfg.JournalRetention != 0 && cfg.JournalRetention < time.Minute:
		// the journal is pruned once a minute: less is a unit left out
		// (--journal-retention 168 is refused as no duration, 1ns is not)
		return fmt.Errorf("%s must be 0 (keep forever) or at least 1m, not %s", name("journal-retention"), cfg.JournalRetention)
	case cfg.MaxRuns < 0:
		return fmt.Errorf("%s must not be negative (0 sets no limit), not %d", name("max-runs"), cfg.MaxRuns)
	case cfg.JournalMax < 0:
		return fmt.Errorf("%s must not be negative", name("journal-max-entries"))
	case cfg.ShutdownGrace < time.Second:
		return fmt.Errorf("%s must be at least 1s, not %s", name("shutdown-grace"), cfg.ShutdownGrace)
	case cfg.Dev && cfg.Repo != "":
		return fmt.Errorf("--dev serves --dev-flows through its own repo: leave %s out", name("repo"))
	case cfg.Dev && (cfg.Branch != "main" || cfg.FlowsDir != "flows"):
		// its repo has --dev-flows on main, under flows/
		what := name("branch")
		if cfg.Branch == "main" {
			what = name("flows-dir")
		}
		return fmt.Errorf("--dev serves --dev-flows through its own repo (branch main, folder flows): leave %s out", what)
	case set["repo"] && cfg.Repo == "":
		// --repo "$REPO" with REPO unset: a host that follows nothing,
		// ready at once with nothing to serve
		if os.Getenv(envName("repo")) != "" {
			return errors.New("--repo is empty: give the config repo's git URL or path (to serve what nexus deploy publishes, leave out both --repo and NEXUS_REPO, which is set)")
		}
		return errors.New("--repo is empty: give the config repo's git URL or path, or leave it out to serve what nexus deploy publishes")
	case cfg.Repo != "" && strings.TrimSpace(cfg.Repo) == "":
		return fmt.Errorf("%s is blank: give the config repo's git URL or path", name("repo"))
	case strings.ContainsFunc(cfg.Repo, unicode.IsControl):
		// taken, a line break or a tab failed at every poll; a URL's
		// password is not shown, nor then the character
		shown, note := cfg.Repo, ""
		stripped := strings.Map(func(r rune) rune {
			if unicode.IsControl(r) {
				return -1
			}
			return r
		}, cfg.Repo)
		if r := gitsync.Redact(stripped); r != stripped {
			shown, note = r, " (not shown)"
		}
		return fmt.Errorf("%s %q holds a control character%s: give the config repo's git URL or path", name("repo"), shown, note)
	case strings.ContainsFunc(cfg.FlowsDir, unicode.IsControl):
		return fmt.Errorf("%s %q holds a control character: give a folder of the repo, such as flows", name("flows-dir"), cfg.FlowsDir)
	case cfg.Dev && strings.ContainsFunc(cfg.DevFlows, unicode.IsControl):
		// taken, a line break was printed in the middle of the
		// refusal of a folder without access.yaml
		return fmt.Errorf("%s %q holds a control character: give the config repo folder to serve (flows/ and access.yaml), such as flows-example", name("dev-flows"), cfg.DevFlows)
	case cfg.SSHKey != "" && gitsync.UsesSSH(cfg.Repo) && strings.ContainsFunc(cfg.SSHKey, unicode.IsControl):
		// checked only when used, as the key is (a NEXUS_SSH_KEY may be
		// shared by hosts following https and ssh repos)
		return fmt.Errorf("%s %q holds a control character: give the private key file for the ssh repo", name("ssh-key"), cfg.SSHKey)
	case !utf8.ValidString(cfg.Repo):
		// taken, it failed at every poll ("illegal UTF-8"); shown
		// without its credentials, as everywhere else
		return fmt.Errorf("%s %q is not valid UTF-8", name("repo"), gitsync.Redact(cfg.Repo))
	case !cfg.Dev && cfg.Repo == "" && (givenOrInEnv(set, "branch") || givenOrInEnv(set, "flows-dir") || givenOrInEnv(set, "ssh-key")):
		// without a repo nothing is fetched: the setting would do nothing,
		// and in the environment it most likely sits beside a misspelt
		// NEXUS_REPO (--poll is let be: a command line kept for both ways)
		given, repo := name("branch"), "--repo"
		for _, f := range []string{"flows-dir", "ssh-key"} {
			if !givenOrInEnv(set, "branch") && givenOrInEnv(set, f) {
				given = name(f)
				break
			}
		}
		if strings.HasPrefix(given, "NEXUS_") {
			repo = "NEXUS_REPO"
		}
		return fmt.Errorf("%s is a setting of the git sync: give %s too (without it the host serves what nexus deploy published)", given, repo)
	case set["admin-key"] && cfg.AdminKey == "":
		// --admin-key "$(cat file)" of an empty file
		if os.Getenv(envName("admin-key")) != "" {
			return errors.New("--admin-key is empty: give a key (to close /status, the API and the UI, leave out both --admin-key and NEXUS_ADMIN_KEY, which is set)")
		}
		return errors.New("--admin-key is empty: give a key, or leave it out to close /status, the API and the UI")
	case set["secret"] && cfg.Secret == "":
		if os.Getenv(envName("secret")) != "" {
			return errors.New("--secret is empty: give one or more secrets, comma-separated (for unsigned doors, leave out both --secret and NEXUS_SECRET, which is set)")
		}
		return errors.New("--secret is empty: give one or more secrets, comma-separated, or leave it out for unsigned doors")
	case cfg.AdminKey != "" && strings.TrimSpace(cfg.AdminKey) == "":
		// an empty secret file mounted by mistake would close the UI and
		// the API without a word
		return fmt.Errorf("%s is blank: give a key, or leave it out to close /status, the API and the UI", name("admin-key"))
	case cfg.Secret != "" && slices.ContainsFunc(strings.Split(cfg.Secret, ","), func(p string) bool { return strings.TrimSpace(p) == "" }):
		// dropped quietly, a blank part could leave the doors unsigned
		// when the operator asked for signatures
		return fmt.Errorf("%s holds an empty secret: give one or more secrets, comma-separated, none blank", name("secret"))
	}
	if cfg.Dev {
		if _, err := checkDevFlows(cfg.DevFlows); err != nil {
			return err
		}
	}
	if err := checkListen(cfg.Listen); err != nil {
		return fmt.Errorf("%s %q: %v", name("listen"), cfg.Listen, err)
	}
	if cfg.Repo != "" {
		if err := gitsync.CheckSource(cfg.Repo, cfg.Branch, cfg.FlowsDir); err != nil {
			var se *gitsync.SourceError
			if errors.As(err, &se) {
				flagName := map[string]string{"Repo": "repo", "Branch": "branch", "FlowsDir": "flows-dir"}[se.Field]
				return fmt.Errorf("%s: %v", name(flagName), se.Err)
			}
			return err
		}
	}
	if cfg.SSHKey != "" && gitsync.UsesSSH(cfg.Repo) {
		// read at every fetch (a rotated key is taken up), but one that
		// cannot be used is said now, not as a sync error at every poll
		if err := gitsync.CheckSSHKey(cfg.SSHKey); err != nil {
			return fmt.Errorf("%s %q: %v", name("ssh-key"), cfg.SSHKey, err)
		}
	}
	if cfg.SSHKey == "" && cfg.Repo != "" && gitsync.UsesSSH(cfg.Repo) && os.Getenv("SSH_AUTH_SOCK") == "" {
		// every fetch would fail the same way, at every poll
		return fmt.Errorf("%s is fetched over ssh, which needs a key: give %s, or run an ssh agent (SSH_AUTH_SOCK is not set)",
			name("repo"), name("ssh-key"))
	}
	if cfg.Repo != "" && gitsync.UsesSSH(cfg.Repo) {
		// the server's host key is checked at every fetch: without a
		// file to check it against, every one fails
		if err := gitsync.CheckKnownHosts(); err != nil {
			return fmt.Errorf("%s is fetched over ssh, which checks the server's host key against a known_hosts file: %v (write one with ssh-keyscan HOST and point SSH_KNOWN_HOSTS at it)",
				name("repo"), err)
		}
	}
	return nil
}

// checkListen refuses an address nexus serve should not listen on: one
// without a port, or with an empty one (net.Listen takes any free port
// then, unsaid), a port that is not a number from 0 to 65535 (a service
// name such as http included), or a host that is neither an IP address
// nor a host name (" ", a blank left by a template, was a resolver's
// error after the state directory was made).
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("not an address: give host:port, such as :9090 or 127.0.0.1:9090")
	}
	if port == "" {
		return errors.New("the port is missing: give host:port, such as :9090 or 127.0.0.1:9090")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("the port %q is not a port number (0 to 65535)", port)
	}
	if host != "" && !isHostName(host) {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("the host %q is not an IP address or a host name", host)
		}
	}
	return nil
}

// isHostName reports whether s is written as a host name: labels of
// letters, digits, '-' and '_' joined by dots (a trailing one allowed), at
// most 253 characters.
func isHostName(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	if err != nil || info.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull) // a character device too, but no one reads it
	return err != nil || !os.SameFile(info, null)
}

func newLogger(format string, w io.Writer) *slog.Logger {
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, nil))
	}
	return slog.New(jsonlog.New(w, nil))
}

// serveGCPercent is the garbage collector's target that nexus serve sets
// when the GOGC environment variable does not say otherwise. A host's
// live heap is small (the live set, buffers) and each request allocates a
// few KiB that die at once, so at Go's default of 100 the collector runs
// dozens of times a second under load; at 200 it runs half as often, for
// about 10% less CPU per queued message and a few MiB more memory (see
// docs/performance.md). GOMEMLIMIT, when set, still bounds the heap.
const serveGCPercent = 200

// checkStateDir refuses a state directory on a network file system
// (queue.CheckLocal); a variable so that a test can stand for NFS.
var checkStateDir = queue.CheckLocal

// minAdminKey is the length under which serve warns about the admin key.
const minAdminKey = 24

// fitWorkerBudget fits a worker budget to an open-file limit (Go raises
// the soft limit to the hard one at start): a queue with a worker keeps
// queue.FilesPerQueue files open for the process's life, and the queues
// may use half the limit, the other half left for connections (each
// request's, each flow's calls out), the registry and the clone. A host
// whose queues took every descriptor it could open accepted no connection,
// and its workers could not open their files again after an error, so
// messages it had acknowledged stayed undelivered; now a queue past the
// budget is refused with the budget's 503 instead. It reports whether it
// lowered the budget.
func fitWorkerBudget(budget int, limit uint64) (int, bool) {
	fit := limit / 2 / queue.FilesPerQueue
	if fit >= uint64(budget) {
		return budget, false
	}
	return max(int(fit), 1), true
}

// serve runs the host until ctx ends, then shuts it down in order: stop
// taking requests and finish those in flight, stop the background work,
// write what is buffered, close the registry. endSignals, the signal
// watch's stop, is called once the shutdown is over, before the line that
// says so.
func serve(ctx context.Context, cfg serveConfig, logger *slog.Logger, stdout io.Writer, endSignals func()) error {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(serveGCPercent)
	}
	stateDir := filepath.Dir(cfg.DB)
	// what can be refused without making anything is refused first (bad
	// usage was, by checkServeConfig): the address is taken now, so that a
	// port in use leaves no state directory behind (connections wait in
	// its backlog until the host serves)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	defer ln.Close() // when the host did not get to serve it
	var devSrc string
	if cfg.Dev {
		if devSrc, err = checkDevFlows(cfg.DevFlows); err != nil {
			return err
		}
		if err := checkDevState(devSrc, cfg.DB); err != nil {
			return fmt.Errorf("development mode: %w", err)
		}
	}
	if err := prepareStateDir(stateDir, cfg.Repo != "" || cfg.Dev); err != nil {
		return err
	}
	var devKey string
	keyShown := false // the banner prints a key it generated, not one given
	if cfg.Dev {
		var err error
		var unlock func()
		if cfg.Repo, devKey, unlock, err = prepareDev(devSrc, stateDir, logger); err != nil {
			return fmt.Errorf("development mode: %w", err)
		}
		defer unlock()
		if cfg.AdminKey == "" {
			if cfg.AdminKey, err = access.Generate(); err != nil {
				return err
			}
			keyShown = true
		}
	}

	if n := len(cfg.AdminKey); n > 0 && n < minAdminKey {
		// the admin key opens the UI from the network, and nothing slows
		// down guessing it: a short one is worth a warning at every start
		logger.Warn(fmt.Sprintf("the admin key is %d characters long; use one of %d or more, such as one nexus key generate prints", n, minAdminKey),
			"event", "weak_admin_key")
	}
	if info, err := os.Stat(stateDir); err == nil && info.Mode().Perm()&^queue.DirMode != 0 {
		// made so by an earlier version, or by hand: what is made in it
		// from now on is the owner's alone, what is there already is not
		logger.Warn(fmt.Sprintf("the state directory %s is open to other users (mode %v): chmod 700 it", stateDir, info.Mode().Perm()),
			"event", "state_directory_open")
	}
	reg, err := registry.Open(ctx, cfg.DB, registry.Options{Logger: logger})
	if err != nil {
		return err
	}
	defer reg.Close()
	if _, err := reg.Load(ctx); err != nil {
		return fmt.Errorf("loading the live set: %w", err)
	}

	metrics := host.NewMetrics()
	watcher := &registry.Watcher{Registry: reg, Logger: logger}
	journal := reg.NewJournalWriter(registry.JournalConfig{Retention: cfg.JournalRetention, MaxEntries: cfg.JournalMax, Logger: logger})
	pruner := &registry.DedupPruner{Registry: reg, Logger: logger}
	var syncer *gitsync.Syncer
	syncHealth := &host.SyncHealth{}
	if cfg.Repo != "" {
		syncer, err = gitsync.New(gitsync.Config{
			Repo: cfg.Repo, Branch: cfg.Branch, FlowsDir: cfg.FlowsDir, Poll: cfg.Poll,
			Dir: filepath.Join(stateDir, "repo"), SSHKeyFile: cfg.SSHKey, Registry: reg, Logger: logger,
			Observe: func(res gitsync.Result, err error) {
				syncHealth.Observe(err != nil || res.Skipped != gitsync.SkippedLocked, err, time.Now())
				switch {
				case err != nil || len(res.Errors) > 0:
					metrics.SyncFailed()
				case res.Skipped == gitsync.SkippedLocked:
				case res.Skipped == gitsync.SkippedRefused:
					// the branch's head is a refused commit, counted once
					// when it was refused: the live set is not on the head,
					// so the last success stays where it was (and goes
					// stale, which is what an alert watches)
				default:
					metrics.SyncSucceeded(time.Now())
				}
			},
		})
		if err != nil {
			return err
		}
		// the last success is the registry's until this process syncs:
		// at 0, an alert on its age fired at every restart, and stayed on
		// while the branch's head is refused (as /status does not)
		if st, err := reg.Status(ctx); err == nil && !st.SyncedAt.IsZero() {
			metrics.SyncSucceeded(st.SyncedAt)
		}
	}
	// The host is the engine's Publisher and the queues' Handler; it is
	// made last, so both reach it through these two functions.
	var doors *host.Server
	eng := engine.New(engine.Config{Dedup: reg.Dedup(), DedupCommitWait: registry.BusyTimeout, Publisher: publisherFunc(func(ctx context.Context, tenant, flow string, payload []byte, cid string) error {
		return doors.Publish(ctx, tenant, flow, payload, cid)
	})})
	defer eng.Close() // its keys let go in the background, before the registry closes
	budget := cfg.MaxWorkers
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err == nil {
		if fit, lowered := fitWorkerBudget(budget, nofile.Cur); lowered {
			logger.Warn(fmt.Sprintf("the open-file limit of %d holds the files of no more than %d queues' workers: the worker budget is %d, not %d (raise the limit: ulimit -n, LimitNOFILE=, --ulimit nofile=)",
				nofile.Cur, fit, fit, budget), "event", "worker_budget_lowered", "max_workers", budget, "budget", fit, "open_file_limit", nofile.Cur)
			budget = fit
		}
	}
	queues := queue.NewManager(queue.ManagerConfig{
		Root: filepath.Join(stateDir, "queues"), MaxWorkers: budget, Logger: logger, OnCommit: metrics.QueueCommitted, StopGrace: cfg.ShutdownGrace,
		Handler: queue.HandlerFunc(func(ctx context.Context, d queue.Delivery) queue.Verdict { return doors.Handle(ctx, d) }),
		Policy:  func(tenant, flow string) (queue.RetryPolicy, bool) { return doors.RetryPolicy(tenant, flow) },
	})
	hostCfg := host.Config{
		Live: reg, Status: reg, History: reg, Engine: eng, Journal: journal, Metrics: metrics, Logger: logger, Queues: queues,
		MaxBodyBytes: cfg.MaxBodyBytes, AdminKey: cfg.AdminKey, Secrets: splitSecrets(cfg.Secret), MaxRuns: cfg.MaxRuns,
		AwaitFirstPublication: cfg.Repo != "",
	}
	if cfg.MaxRuns == 0 {
		hostCfg.MaxRuns = -1 // no limit
	}
	if syncer != nil {
		hostCfg.Sync, hostCfg.SyncHealth = syncer, syncHealth
	}
	cron := scheduler.New(scheduler.Config{
		Live: reg, Queues: queues, Dir: filepath.Join(stateDir, "cron"), Logger: logger, NewID: flow.NewUUID,
	})
	hostCfg.NextTick = cron.NextTick
	doors = host.New(hostCfg)
	handler, drainHandler := doors.Handler(), doors.DrainHandler()
	if tcp, ok := ln.Addr().(*net.TCPAddr); cfg.Dev && ok && tcp.IP.IsLoopback() {
		handler, drainHandler = host.LoopbackNamesOnly(handler), host.LoopbackNamesOnly(drainHandler)
	}
	newServer := func(handler http.Handler) *http.Server {
		return &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       60 * time.Second,
			IdleTimeout:       120 * time.Second,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
			// OPTIONS * reaches the router too (405 with a correlation ID,
			// like every answer), not net/http's silent 200
			DisableGeneralOptionsHandler: true,
		}
	}
	srv := newServer(handler)
	fresh := &host.NewConns{}
	srv.ConnState = fresh.Hook
	// during the shutdown's drain the listener stays open: a drain server
	// answers /healthz 200, /readyz 503 and every other request 503
	// (Retry-After: 1), so that a liveness probe is not refused while the
	// requests in flight finish
	drainSrv := newServer(drainHandler)
	drainSrv.SetKeepAlivesEnabled(false)
	sln := host.NewShutdownListener(ln, drainSrv)
	defer sln.Stop()

	journal.Start()
	watcher.Start()
	pruner.Start()
	if syncer != nil {
		syncer.Start()
	}
	cron.Start()
	queues.Start()
	served := make(chan error, 1)
	// net/http's own refusals (431, 400, 501) in the platform's JSON, with
	// a correlation ID, as every other answer
	go func() { served <- srv.Serve(host.PlatformAnswers(sln.Main())) }()
	logger.Info("nexus is serving", "event", "started", "version", buildVersion(), "listen", ln.Addr().String(), "db", cfg.DB, "repo", gitsync.Redact(cfg.Repo), "flows", len(reg.Live().Flows()))
	bannerCtx, stopBanner := context.WithCancel(ctx)
	bannerDone := make(chan struct{})
	defer func() { stopBanner(); <-bannerDone }()
	if cfg.Dev {
		// once the first sync has published, so that the banner's example
		// answers (before it, the doors answer 503: starting); a first
		// sync that fails says why in the log, and the banner waits
		go func() {
			defer close(bannerDone)
			if awaitFirstPublication(bannerCtx, reg) {
				printDevBanner(stdout, ln.Addr(), devKey, keyShown, cfg)
			}
		}()
	} else {
		close(bannerDone)
	}

	select {
	case <-ctx.Done():
	case err = <-served:
		logger.Error("the listener failed", "event", "fatal", "error", err.Error())
	}
	logger.Info("shutting down: finishing the requests and deliveries in flight (a second SIGINT or SIGTERM stops at once)", "event", "stopping")
	// new connections go to the drain server from now on, and /readyz
	// answers 503 on both servers
	sln.Drain()
	doors.Drain()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	// while the requests in flight are answered, no tick is made and no
	// delivery begins: each worker finishes the one it is in (the queues
	// still take the appends of the requests being answered, which wait
	// in the log for the next start)
	workersStopped := make(chan struct{})
	go func() {
		cron.Stop()
		queues.StopWorkers()
		close(workersStopped)
	}()
	// a connection the main server took before the switch is answered
	// (/readyz 503) rather than closed unread by Shutdown
	fresh.Settle(time.Second)
	if serr := srv.Shutdown(shutdownCtx); serr != nil {
		// the grace is over: the /run executions still running are
		// stopped, so that each answers its caller and is logged and
		// journaled, rather than cut off by the exit
		logger.Warn("the shutdown's grace ended with requests in flight: their executions are stopped", "event", "stopping",
			"grace", cfg.ShutdownGrace.String())
		doors.InterruptRuns()
		lastCtx, cancelLast := context.WithTimeout(context.Background(), interruptedAnswerWait)
		if serr := srv.Shutdown(lastCtx); serr != nil {
			logger.Error("requests were still running after their executions were stopped: their connections are closed", "event", "stopping", "error", serr.Error())
			srv.Close()
		}
		cancelLast()
	}
	<-workersStopped
	// the requests and the deliveries in flight are done: the listener
	// closes (until now /healthz was answered)
	sln.Stop()
	queues.Stop() // the workers have written their checkpoints: the queues close
	if syncer != nil {
		syncer.Stop()
	}
	pruner.Stop()
	watcher.Stop()
	journal.Close() // an execution still running past the deadline: its entry is counted as dropped
	// the shutdown is over: a second signal from now on is not said
	// after this line (and one being handled ends the process first)
	endSignals()
	logger.Info("nexus stopped", "event", "stopped")
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// prepareStateDir makes the state directory, the owner's alone, and
// checks it (checkStateDir) and the folders nexus keeps in it, the clone's
// too when withClone: a link planted at one is refused. It is called
// before the registry is made, so that a refused start leaves nothing
// behind.
func prepareStateDir(stateDir string, withClone bool) error {
	// made first, the owner's alone: the development mode's repo goes in
	// it, and go-git makes missing folders open to everyone
	if err := os.MkdirAll(stateDir, queue.DirMode); err != nil {
		return fmt.Errorf("the state directory: %w", err)
	}
	if err := checkStateDir(stateDir); err != nil {
		return err
	}
	// the folders nexus keeps in its state directory are its own: a link
	// planted at one would have every tenant's messages written wherever
	// it points (the state directory itself may be a link: that is the
	// operator's choice of where it lives)
	owned := []string{"queues", "cron"}
	if withClone {
		owned = append(owned, "repo") // the clone gitsync keeps
	}
	for _, name := range owned {
		p := filepath.Join(stateDir, name)
		if info, err := os.Lstat(p); err == nil && info.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symbolic link: the folders of the state directory are its own (to keep the state elsewhere, move the whole state directory)", p)
		}
	}
	return nil
}

// interruptedAnswerWait is how long a shutdown whose grace has ended waits
// for the answers of the /run executions it stopped (and for requests
// still sending their bodies) before it closes their connections.
const interruptedAnswerWait = 5 * time.Second

// publisherFunc adapts a function to engine.Publisher.
type publisherFunc func(ctx context.Context, tenant, flow string, payload []byte, correlationID string) error

func (f publisherFunc) Publish(ctx context.Context, tenant, flow string, payload []byte, correlationID string) error {
	return f(ctx, tenant, flow, payload, correlationID)
}

func splitSecrets(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// checkDevFlows checks that dir, --dev-flows, is a config repo folder, and
// returns its absolute path.
func checkDevFlows(dir string) (string, error) {
	src, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(src, "access.yaml")); err != nil {
		return "", fmt.Errorf("--dev-flows %q is not a config repo folder (flows/ and access.yaml): access.yaml: %w", dir, pathError(err))
	}
	return src, nil
}

// checkDevState refuses the registry file db (--db) whose folder, the
// state directory, is the development flows folder src itself (checkDevFlows's
// answer), whatever links name them. CommitFolder leaves out of its copy
// the folder of src that holds its repo; there that folder would be src,
// and every start committed the state (registry.db, the queues' logs and
// their payloads, the clone) into dev-repo with the flows. A state
// directory further down in src (./.nexus-dev, the default) is left out.
func checkDevState(src, db string) error {
	state, err := os.Stat(filepath.Dir(db))
	if err != nil {
		return nil // not made yet: not src, which is
	}
	if served, err := os.Stat(src); err != nil || !os.SameFile(state, served) {
		return nil
	}
	return fmt.Errorf("--db %s puts the state directory at the top of the folder --dev-flows serves, %s: its files (registry.db, the queues) would be committed with the flows; give --db a file in a folder of its own, such as %s",
		db, src, filepath.Join(src, ".nexus-dev", "registry.db"))
}

// prepareDev commits the development flows folder src (checkDevFlows's
// answer) into a local git repo in the state directory, so that the host
// serves it through the same git sync as production. It returns the repo
// and a key that can call the example flows. A symbolic link or special
// file of the folder is not served: a warning names each. The repo is the
// process's until unlock is called (see lockDevRepo): another nexus serve
// --dev on the state directory is refused.
func prepareDev(src, stateDir string, logger *slog.Logger) (repo, key string, unlock func(), err error) {
	data, err := os.ReadFile(filepath.Join(src, "access.yaml"))
	if err != nil {
		return "", "", nil, err
	}
	repo = filepath.Join(stateDir, "dev-repo")
	if unlock, err = lockDevRepo(repo); err != nil {
		return "", "", nil, err
	}
	_, skipped, err := gitsync.CommitFolder(repo, src)
	if err != nil {
		unlock()
		return "", "", nil, err
	}
	for _, e := range skipped {
		logger.Warn(fmt.Sprintf("%s is %s: not served (a config repo holds regular files; %s)", e.Path, e.Reason, e.Advice),
			"event", "dev_file_skipped", "path", e.Path)
	}
	if keys, err := access.Parse("access.yaml", data); err == nil {
		if k, ok := keys.Lookup(exampleKey); ok && k.AllFlows {
			key = exampleKey
		}
	}
	return repo, key, unlock, nil
}

// lockDevRepo takes the lock of the development mode's repo, the file
// repo+".lock" (flock(2), exclusive), which the process holds until it
// calls unlock or ends. Two nexus serve --dev on one state directory both
// rewrote the repo, each committing its folder over the other's: the
// second is refused, naming the state directory.
func lockDevRepo(repo string) (unlock func(), err error) {
	path := repo + ".lock"
	// no symbolic link in the state directory: one planted here is refused
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the lock of its repo: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	switch {
	case errors.Is(err, syscall.EWOULDBLOCK):
		f.Close()
		return nil, fmt.Errorf("another nexus serve --dev is using the state directory %s: stop it, or give this one another --db", filepath.Dir(repo))
	case err != nil:
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// awaitFirstPublication waits until the registry's live set holds a
// publication, and reports whether one came before ctx ended.
func awaitFirstPublication(ctx context.Context, reg *registry.Registry) bool {
	for {
		if live := reg.Live(); live != nil && live.Generation() > 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func printDevBanner(w io.Writer, addr net.Addr, key string, keyShown bool, cfg serveConfig) {
	port := "9090"
	if ta, ok := addr.(*net.TCPAddr); ok {
		port = fmt.Sprint(ta.Port)
	}
	fmt.Fprintf(w, "\nNexus development mode: serving %s through the git repo %s\n", cfg.DevFlows, filepath.Join(filepath.Dir(cfg.DB), "dev-repo"))
	if keyShown {
		fmt.Fprintf(w, "  admin key (/status, UI):  %s\n", cfg.AdminKey)
	} else {
		fmt.Fprintf(w, "  admin key (/status, UI):  the one given (--admin-key or NEXUS_ADMIN_KEY; not shown)\n")
	}
	fmt.Fprintf(w, "  management UI:            http://localhost:%s/ui/ (log in with the admin key)\n", port)
	switch {
	case key != "" && cfg.Secret != "":
		// every door wants a signature: the request is signed as the
		// README signs it, the secret read from NEXUS_SECRET (a secret
		// is not printed); unsigned, it answered 401
		fmt.Fprintf(w, "  example key (tenant acme): %s\n\nTry it (--secret is set, so every door wants a signature: run this in a shell whose NEXUS_SECRET holds the secret, one of them when several are given):\n\n", key)
		fmt.Fprintf(w, "  ts=$(date +%%s) body='{\"name\":\"Ada\"}'\n")
		fmt.Fprintf(w, "  sig=$(printf '%%s.%%s' \"$ts\" \"$body\" | openssl dgst -sha256 -hmac \"$NEXUS_SECRET\" -r | cut -d' ' -f1)\n")
		fmt.Fprintf(w, "  curl -X POST http://localhost:%s/flows/acme/hello/run \\\n    -H \"Authorization: Bearer %s\" \\\n    -H 'Content-Type: application/json' -H \"X-Nexus-Timestamp: $ts\" -H \"X-Nexus-Signature: v1=$sig\" -d \"$body\"\n\n", port, key)
	case key != "":
		fmt.Fprintf(w, "  example key (tenant acme): %s\n\nTry it:\n\n", key)
		fmt.Fprintf(w, "  curl -X POST http://localhost:%s/flows/acme/hello/run \\\n    -H \"Authorization: Bearer %s\" \\\n    -H 'Content-Type: application/json' -d '{\"name\":\"Ada\"}'\n\n", port, key)
	}
	fmt.Fprintf(w, "Edit %s and restart to serve the change. Ctrl-C stops.\n\n", cfg.DevFlows)
}
