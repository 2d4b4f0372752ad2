package limiter

import (
	"context"
	"hash/maphash"
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
type keyLeases struct {
	seed maphash.Seed
	mu   sync.Mutex
	held map[uint64]*lease
}

// lease is one batch's hold on its keys; done is closed when it ends.
type lease struct {
	hashes []uint64
	done   chan struct{}
}

func newKeyLeases() *keyLeases {
	return &keyLeases{seed: maphash.MakeSeed(), held: map[uint64]*lease{}}
}

// acquire leases every key of calls, waiting while another batch holds one
// of them, until ctx ends (then it returns ctx.Err()). The caller ends the
// lease with release, once its write has landed or failed.
func (l *keyLeases) acquire(ctx context.Context, calls []*call) (*lease, error) {
	ls := &lease{done: make(chan struct{})}
	for _, c := range calls {
		for si := range c.p.sections {
			ls.hashes = append(ls.hashes, maphash.Bytes(l.seed, c.p.key(&c.p.sections[si])))
		}
	}
	for {
		busy := l.tryHold(ls)
		if busy == nil {
			return ls, nil
		}
		select {
		case <-busy.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// tryHold holds every hash of ls and returns nil, or holds none and returns
// a lease that holds one of them.
func (l *keyLeases) tryHold(ls *lease) *lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range ls.hashes {
		if other, ok := l.held[h]; ok && other != ls {
			return other
		}
	}
	for _, h := range ls.hashes {
		l.held[h] = ls // a key twice in the batch is held once
	}
	return nil
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
