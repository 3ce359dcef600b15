// Package enginetest holds in-memory implementations of the interfaces
// package engine declares, for tests: a DedupStore and a Publisher.
package enginetest

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nexushq/nexus/engine"
)

var (
	_ engine.DedupStore = (*Dedup)(nil)
	_ engine.Publisher  = (*Publisher)(nil)
)

// Dedup is an in-memory engine.DedupStore. Err, when set, fails every call.
type Dedup struct {
	// Now is the store's clock; nil means time.Now.
	Now func() time.Time

	mu      sync.Mutex
	err     error
	records map[string]*dedupRecord
	claims  int64           // the last claim handed out
	leases  []time.Duration // of every Claim call, in order
}

type dedupRecord struct {
	answer  []byte
	failed  bool
	expires time.Time // of the record, or of the claim's lease
	claim   int64     // the claim holding the key; 0 for a committed answer
}

// Fail makes every later call return err (nil restores the store).
func (d *Dedup) Fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = err
}

// Leases returns the lease of every Claim call made, in order.
func (d *Dedup) Leases() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.leases)
}

func (d *Dedup) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

func dedupID(tenant, flow, key string) string { return tenant + "\x00" + flow + "\x00" + key }

// Claim implements engine.DedupStore.
func (d *Dedup) Claim(_ context.Context, tenant, flow, key string, rerunFailed bool, lease time.Duration) ([]byte, int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return nil, 0, d.err
	}
	if d.records == nil {
		d.records = map[string]*dedupRecord{}
	}
	d.leases = append(d.leases, lease)
	id := dedupID(tenant, flow, key)
	now := d.now()
	r, ok := d.records[id]
	switch {
	case !ok || !now.Before(r.expires) || r.claim == 0 && r.failed && rerunFailed:
		d.claims++
		d.records[id] = &dedupRecord{claim: d.claims, expires: now.Add(lease)}
		return nil, d.claims, nil
	case r.claim != 0:
		return nil, 0, nil
	}
	return r.answer, 0, nil
}

// Commit implements engine.DedupStore.
func (d *Dedup) Commit(_ context.Context, tenant, flow, key string, claim int64, answer []byte, failed bool, ttl time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return d.err
	}
	id := dedupID(tenant, flow, key)
	if r, ok := d.records[id]; ok && claim != 0 && r.claim == claim {
		d.records[id] = &dedupRecord{answer: answer, failed: failed, expires: d.now().Add(ttl)}
	}
	return nil
}

// Release implements engine.DedupStore.
func (d *Dedup) Release(_ context.Context, tenant, flow, key string, claim int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return d.err
	}
	id := dedupID(tenant, flow, key)
	if r, ok := d.records[id]; ok && claim != 0 && r.claim == claim {
		delete(d.records, id) // a committed answer is not released
	}
	return nil
}

// Message is one message a Publisher received.
type Message struct {
	Tenant, Flow  string
	Payload       string
	CorrelationID string
}

// Publisher is an in-memory engine.Publisher: it keeps what it is given.
// Err, when set, refuses every publication.
type Publisher struct {
	mu       sync.Mutex
	Err      error
	messages []Message
}

// Publish implements engine.Publisher.
func (p *Publisher) Publish(_ context.Context, tenant, flow string, payload []byte, correlationID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Err != nil {
		return p.Err
	}
	p.messages = append(p.messages, Message{Tenant: tenant, Flow: flow, Payload: string(payload), CorrelationID: correlationID})
	return nil
}

// Messages returns what was published, in order.
func (p *Publisher) Messages() []Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Message(nil), p.messages...)
}
