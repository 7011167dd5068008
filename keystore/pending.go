package keystore

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
)

// A revocation cannot wait for Redis: a key that leaked must stop working
// now. When the shared store is out of reach, Revoke denies the key on
// this instance at once (a local deny) and keeps the revocation pending;
// the first poll that reaches Redis again stores it as an ordinary edit,
// and every other instance applies it from there. Until then the other
// instances still accept the key, which is why the answer says the
// revocation is pending. Pending revocations live in memory: an instance
// restarted before Redis returns forgets them (its operator is told so
// in the log, and in the answer).

// pendingRevoke is a revocation not stored yet.
type pendingRevoke struct {
	id, by string
	at     time.Time
}

// ErrPending is returned (wrapped) by Revoke when the key was denied on
// this instance only: the shared store was out of reach, and the
// revocation is stored for the cluster once it is back.
var ErrPending = errors.New("revoked on this instance only; stored for every instance once Redis is reachable again")

// revokeLocally denies key id on this instance, with the Doc in force
// left as it is, and queues the revocation. The caller holds s.mu.
func (s *Store) revokeLocally(id, by string, cause error) (time.Time, error) {
	p, next, commit, err := s.nextAt(s.rules.revoke(id, by), s.view(s.doc), s.doc.Version)
	if err != nil {
		return time.Time{}, err // unknown or already revoked here: refused as usual
	}
	_ = next
	var at time.Time
	if len(p.Keys) > 0 {
		at = *p.Keys[0].Revoked
	} else {
		at = *p.ConfigKeys[0].Revoked
	}
	s.pending = append(s.pending, pendingRevoke{id: id, by: by, at: at})
	commit()
	s.o.Log.Warn("keys: the shared keys are out of reach; the key is denied on this instance and the revocation is stored once Redis is back",
		zap.String("key", id), zap.Error(cause))
	return at, ErrPending
}

// view is d with the pending revocations laid over (the Doc the keys in
// force on this instance come from), at d's version; d itself when none
// are pending.
func (s *Store) view(d *Doc) *Doc {
	if len(s.pending) == 0 {
		return d
	}
	base, now := s.o.Base(), s.o.Clock.Now()
	for _, pr := range s.pending {
		p, err := s.rules.revoke(pr.id, pr.by)(d, base, now)
		if err != nil {
			continue // revoked already, or gone
		}
		p.Version = d.Version
		d = d.with(p)
	}
	return d
}

// flushPending stores the pending revocations once Redis answers; a
// revocation already made (by another instance, or gone with its key)
// is dropped. The caller holds s.mu.
func (s *Store) flushPending(ctx context.Context) error {
	for len(s.pending) > 0 {
		pr := s.pending[0]
		p, err := s.rules.revoke(pr.id, pr.by)(s.doc, s.o.Base(), pr.at)
		if err != nil {
			s.pending = s.pending[1:]
			continue
		}
		p.Version = s.doc.Version + 1
		won, err := s.putRecord(ctx, s.doc.Version, p)
		if err != nil {
			return err
		}
		if !won {
			return nil // another edit came first: the next poll reads it, then tries again
		}
		s.pending = s.pending[1:]
		s.doc = s.keepCopy(s.doc.with(p), p)
		s.o.Log.Info("keys: a revocation made while Redis was out of reach is stored for every instance", zap.String("key", pr.id))
	}
	return nil
}
