package engine

import "net/http"

// Kind is what kind of failure ended an execution. The status a caller sees
// is derived from it in one place, Status.
type Kind int

// The kinds of failure, one per row of the status table of
// handling-failures.md.
const (
	// KindSyntactic is a validate rule of kind syntactic.
	KindSyntactic Kind = iota + 1
	// KindSemantic is a validate rule of kind semantic (the default), or a
	// rule whose expression failed.
	KindSemantic
	// KindDedupKey is a dedup_key that produced nothing from this message:
	// it rendered empty, or every hole in it rendered blank.
	KindDedupKey
	// KindCorrelationOpen is a correlation already open for the same key.
	// Correlations are not built yet; the row is kept so the table stays whole.
	KindCorrelationOpen
	// KindCorrelationRefused is a refused correlation (nothing open, already
	// settled, state too large, key not formed). Not built yet, like above.
	KindCorrelationRefused
	// KindEffect is an effect that failed: a call out that did not succeed.
	KindEffect
	// KindStateUnavailable is flow state the platform cannot honour right now
	// (the dedup store could not be read or written).
	KindStateUnavailable
	// KindDefect is a defect in the flow: an expression that failed, a
	// template that rendered no status, a refused encoding.
	KindDefect
	// KindBranchTimeout is a parallel branch that timed out. Parallel branches
	// are not built yet; the row is kept so the table stays whole.
	KindBranchTimeout
	// KindDeadline is the flow's duration ceiling (timeout_ms) reached.
	KindDeadline
	// KindHandlerFailed is a fault sequence that itself failed.
	KindHandlerFailed
	// KindInternal is a failure of the platform, none of the flow's doing.
	KindInternal
)

var kindNames = map[Kind]string{
	KindSyntactic: "syntactic", KindSemantic: "semantic", KindDedupKey: "dedup_key",
	KindCorrelationOpen: "correlation_open", KindCorrelationRefused: "correlation_refused",
	KindEffect: "effect", KindStateUnavailable: "state_unavailable", KindDefect: "defect",
	KindBranchTimeout: "branch_timeout", KindDeadline: "deadline",
	KindHandlerFailed: "handler_failed", KindInternal: "internal",
}

func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "unknown"
}

// Status is the one status table: the status a failure of kind k answers,
// with or without a fault handler, on every door.
func Status(k Kind) int {
	switch k {
	case KindSyntactic, KindDedupKey:
		return http.StatusBadRequest
	case KindSemantic, KindCorrelationRefused:
		return http.StatusUnprocessableEntity
	case KindCorrelationOpen:
		return http.StatusConflict
	case KindEffect:
		return http.StatusBadGateway
	case KindStateUnavailable:
		return http.StatusServiceUnavailable
	}
	// defects, branch timeouts, the duration ceiling, a failed handler and
	// the platform's own failures
	return http.StatusInternalServerError
}
