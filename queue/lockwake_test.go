package queue

import (
	"testing"
	"testing/synctest"
	"time"
)

// A bounded wait for the append lock that another goroutine of this
// process holds (the worker's drain or dead-lettering, an operator's
// replay) takes it the moment it is let go, as a blocking Lock would: a
// batch's leader is not kept waiting after it. The wait polled, sleeping
// up to 5 ms between tries, so an append behind the worker's use of the
// lock came up to 5 ms late. The clock is synctest's: the lock is let go
// at a known instant, and the waiter's is compared with it.
func TestBoundedLockTakenWhenLetGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, _, err := Open(t.TempDir(), testTenant, testFlow, Options{LockWait: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		unlock, err := q.lockAppend()
		if err != nil {
			t.Fatal(err)
		}
		took := make(chan time.Time, 1)
		go func() {
			unlock, err := q.lockAppendBounded()
			if err != nil {
				t.Error(err)
				took <- time.Time{}
				return
			}
			at := time.Now()
			unlock()
			took <- at
		}()
		time.Sleep(time.Second + 123*time.Microsecond) // the waiter waits
		letGo := time.Now()
		unlock()
		if at := <-took; !at.Equal(letGo) {
			t.Errorf("the bounded wait took the lock %v after it was let go, want at once", at.Sub(letGo))
		}
	})
}
