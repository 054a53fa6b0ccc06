package kafka

import "sync"

// workers runs functions each on a goroutine of its own, as the go
// statement does, but a goroutine whose function returned waits for the
// next function instead of exiting: a record's handler then starts on a
// stack an earlier one already grew, where a fresh goroutine would grow
// its stack again, by copying it, on every record (the handler chain runs
// deeper than a goroutine's first stack).
//
// Go may be called from any goroutine; Wait waits for every function Go
// was given to return. stop lets the waiting goroutines exit; a function
// still running when it is called, or given to Go after it, runs to its
// end on a goroutine that then exits.
type workers struct {
	calls sync.WaitGroup // functions given to Go that have not returned
	next  chan func()    // to a goroutine waiting for work; unbuffered
	done  chan struct{}  // closed by stop
}

func newWorkers() *workers {
	return &workers{next: make(chan func()), done: make(chan struct{})}
}

// Go runs f on a waiting goroutine, or on a new one when none waits.
func (w *workers) Go(f func()) {
	w.calls.Add(1)
	select {
	case w.next <- f:
	default:
		go w.serve(f)
	}
}

// serve runs f, then every function handed to it, until stop.
func (w *workers) serve(f func()) {
	for {
		f()
		w.calls.Done()
		select {
		case f = <-w.next:
		case <-w.done:
			return
		}
	}
}

// Wait returns once every function given to Go has returned.
func (w *workers) Wait() { w.calls.Wait() }

// stop ends the goroutines waiting for work, now and once their function
// returns. Only one call is allowed.
func (w *workers) stop() { close(w.done) }
