package host_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A /run of a flow whose steps each repeat the document twice answers
// 500 once a step's document passes the bound (10 MiB), with a one-line
// error naming the step and the limit in the journal and the log, and the
// server keeps serving: 24 such steps took a 1 KB message to 16 GB before.
func TestRunOfADoublingFlowAnswers500AndTheServerServes(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	fx.publishWith("doubling", "", doublingSteps(24))

	w := fx.serve(runRequest("acme", "doubling", keyAcmeAll, `{"text":"`+strings.Repeat("x", 1000)+`"}`, "X-Correlation-ID", "dbl-1"))
	if w.Code != http.StatusInternalServerError || w.Body.String() != `{"ok":false,"error":"flow execution failed"}` {
		t.Fatalf("the doubling run: %d %.200s", w.Code, w.Body)
	}
	const want = "step 'double14': ntd: the document is larger than the limit of 10485760 bytes"
	if evs := fx.logs.Events(t, "run_completed"); len(evs) != 1 || evs[0]["error"] != want || evs[0]["step"] != "double14" || evs[0]["status"] != 500.0 {
		t.Errorf("the log: %v", evs)
	}
	if w := fx.serve(runRequest("acme", "echo", keyAcmeAll, `{"a":1}`)); w.Code != http.StatusOK || w.Body.String() != `{"a":1}` {
		t.Errorf("a run after it: %d %s", w.Code, w.Body)
	}
	var entries []journalDoc
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if entries = fx.journal(t, "tenant=acme&flow=doubling"); len(entries) > 0 {
			break
		}
	}
	if len(entries) != 1 || entries[0].Error != want || entries[0].Status != 500 || entries[0].Outcome != "failed" {
		t.Errorf("the journal: %+v", entries)
	}
}

// A queued message of the doubling flow fails as any defect does: its
// delivery is journaled with the step and the limit, and with
// queue_max_attempts: 1 it is dead-lettered.
func TestQueuedMessageOfADoublingFlowIsDeadLettered(t *testing.T) {
	fx := newAdminFixture(t, adminOptions{key: adminKey})
	fx.publishWith("doubling", "queue_max_attempts: 1\n", doublingSteps(24))
	fx.enqueue(t, "doubling", `{"text":"`+strings.Repeat("x", 1000)+`"}`)
	if e := fx.waitJournal(t, "acme", "doubling", 1); e.Error != "step 'double14': ntd: the document is larger than the limit of 10485760 bytes" ||
		e.Status != 500 || e.Outcome != "failed" {
		t.Errorf("the delivery's journal entry: %+v", e)
	}
	var got []uint64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if got = fx.pendingIDs(t, "acme", "doubling"); len(got) > 0 {
			break
		}
	}
	if len(got) != 1 || got[0] != 1 {
		t.Errorf("dead letters: %v, want [1]", got)
	}
}

// doublingSteps are n ntd steps double1…doubleN, each holding its
// document twice.
func doublingSteps(n int) string {
	var steps strings.Builder
	for i := 1; i <= n; i++ {
		steps.WriteString("## Step: double" + strconv.Itoa(i) + "\n```ntd\n{\"a\": {{ $ }}, \"b\": {{ $ }}}\n```\n\n")
	}
	return steps.String()
}
