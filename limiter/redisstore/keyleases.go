package redisstore

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
)

// keyLeases holds the keys of the batch sends this store is deciding in Go,
// from their read to their write. Two batch sends of one gateway that share
// a key would otherwise both read it before either writes: the second's
// compare-and-set would fail, and the batch would pay for a read, a refused
// write and the script (about six times a batch decided in Go), and mark the
// key hot. A batch that finds one of its keys leased waits for that lease to
// end instead, and then reads what was written.
//
// Keys are held by a 64-bit hash: two keys that share one only make a batch
// wait for nothing. A batch never holds a lease while it waits, so leases
// cannot deadlock. Other gateways, and this gateway's single sends, do not
// take leases: their conflicts are still caught by the compare-and-set.
//
// A batch that keeps being overtaken goes first: one whose keys are each
// free at some moment but never all at once (a key every batch shares,
// and many senders) could otherwise lose every race until its timeout, and
// the store's on_error would then decide its 500 entries at once. A batch
// is overtaken when a lease taken after it started waiting holds one of its
// keys; after urgentAfter times it takes a ticket, and no batch may take a
// key an older ticket waits for. The oldest ticket is first on each of its
// keys, so it goes as soon as the leases before it end. Until then anyone
// free goes: making every waiting batch's keys wait in order cost 15-35 %
// of the throughput of four senders overlapping in a recipient or two a
// batch (redisbench freqcap-batch); this costs nothing measurable there.
type keyLeases struct {
	seed maphash.Seed
	mu   sync.Mutex
	held map[uint64]*lease
	// waiting lists, for each hash, the tickets of the urgent batches
	// waiting for it, oldest first.
	waiting map[uint64][]uint64
	ticket  uint64 // the last ticket given out
	taken   uint64 // the leases taken so far
	// urgentAfter is how often a batch is overtaken before it takes a
	// ticket.
	urgentAfter int
	// queueMoved is closed, and replaced, each time an urgent batch stops
	// waiting (it got its keys, or gave up): what a batch kept back by
	// one waits for.
	queueMoved chan struct{}
}

// lease is one batch's hold on its keys; done is closed when it ends.
type lease struct {
	hashes []uint64
	done   chan struct{}
	taken  uint64 // keyLeases.taken when it was taken
	// since is keyLeases.taken when the batch first waited (0: it has
	// not), and overtaken how often a lease taken since held its keys.
	since, overtaken uint64
	ticket           uint64 // its place among urgent batches; 0 before it is one
}

func newKeyLeases() *keyLeases {
	return &keyLeases{
		seed:        maphash.MakeSeed(),
		held:        map[uint64]*lease{},
		waiting:     map[uint64][]uint64{},
		urgentAfter: 3,
		queueMoved:  make(chan struct{}),
	}
}

// acquire leases every key of calls, waiting while another batch holds one
// of them or an urgent batch that has waited longer wants one, until ctx
// ends (then it returns ctx.Err()). The caller ends the lease with
// release, once its write has landed or failed.
func (l *keyLeases) acquire(ctx context.Context, calls []*call) (*lease, error) {
	ls := l.newLease(calls)
	for {
		wait := l.tryHold(ls)
		if wait == nil {
			return ls, nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			l.mu.Lock()
			l.stopWaiting(ls)
			l.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

// newLease is a lease, not yet held, on the keys of calls.
func (l *keyLeases) newLease(calls []*call) *lease {
	ls := &lease{done: make(chan struct{})}
	for _, c := range calls {
		for si := range c.p.Sections {
			ls.hashes = append(ls.hashes, maphash.Bytes(l.seed, c.p.Key(&c.p.Sections[si])))
		}
	}
	return ls
}

// tryHold holds every hash of ls and returns nil, or holds none and
// returns what to wait for: the end of a lease that holds one of them, or
// the move of an urgent batch that wants one. Once overtaken urgentAfter
// times, ls waits as an urgent batch, in the queues of its hashes.
func (l *keyLeases) tryHold(ls *lease) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	var wait <-chan struct{}
	for _, h := range ls.hashes {
		if other, ok := l.held[h]; ok && other != ls {
			wait = other.done
			if ls.since > 0 && other.taken >= ls.since {
				ls.overtaken++
			}
			break
		}
		if q := l.waiting[h]; len(q) > 0 && q[0] != ls.ticket {
			wait = l.queueMoved // an older urgent batch goes first
			break
		}
	}
	if wait == nil {
		l.stopWaiting(ls)
		for _, h := range ls.hashes {
			l.held[h] = ls // a key twice in the batch is held once
		}
		l.taken++
		ls.taken = l.taken
		return nil
	}
	if ls.since == 0 {
		ls.since = l.taken + 1 // a lease taken from now on overtakes it
	}
	if ls.overtaken >= uint64(l.urgentAfter) && ls.ticket == 0 {
		l.ticket++
		ls.ticket = l.ticket
		for _, h := range ls.hashes {
			if q := l.waiting[h]; len(q) == 0 || q[len(q)-1] != ls.ticket {
				l.waiting[h] = append(q, ls.ticket)
			}
		}
	}
	return wait
}

// stopWaiting takes ls out of the queues of its hashes, if it is in them,
// and wakes the batches it kept back. l.mu is held.
func (l *keyLeases) stopWaiting(ls *lease) {
	if ls.ticket == 0 {
		return
	}
	for _, h := range ls.hashes {
		q := l.waiting[h]
		if i := slices.Index(q, ls.ticket); i >= 0 {
			q = slices.Delete(q, i, i+1)
		}
		if len(q) == 0 {
			delete(l.waiting, h)
		} else {
			l.waiting[h] = q
		}
	}
	ls.ticket = 0
	close(l.queueMoved)
	l.queueMoved = make(chan struct{})
}

// release ends ls: the batches waiting for it try again.
func (l *keyLeases) release(ls *lease) {
	l.mu.Lock()
	for _, h := range ls.hashes {
		if l.held[h] == ls {
			delete(l.held, h)
		}
	}
	l.mu.Unlock()
	close(ls.done)
}
