package computedomain

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	cdv1beta1 "cdplane/api/v1beta1"
)

// written remembers what this controller last wrote for each domain (its cliques and its
// status), so that a pass never computes membership from a cache that has not yet seen the
// previous pass's writes. Under load the cache can lag the apiserver by seconds, longer than the
// batch window between two passes; a pass reading the lagging cache would take the entries it
// had just written for absent, and give a joining node whose name sorts first the index just
// given to another: an index moving under IMEX, which the membership rules exist to prevent.
//
// What is remembered is trusted only while the cache still shows a version older than it:
// each record keeps the resourceVersion the write returned and the versions it replaced (the
// ones the cache showed when the write was made, and earlier remembered writes). A cached
// object at the written version means the cache caught up; at any other version, someone else
// wrote the object since (a user, another replica that led in between): either way the cache is
// read and the record dropped. Versions are only compared for equality. A record older than
// writtenTTL is dropped too: a cache that far behind is not lagging but broken, and trusting the
// record longer could hide a change the cache never showed (an object created and then deleted
// by someone else before the cache saw either).
type written struct {
	mu      sync.Mutex
	domains map[types.NamespacedName]*writtenDomain
}

type writtenDomain struct {
	uid     types.UID
	cliques map[string]*writtenObject[*cdv1beta1.ComputeDomainClique]
	status  *writtenObject[*cdv1beta1.ComputeDomainStatus]
}

// writtenTTL bounds how long a write is trusted over the cache.
const writtenTTL = time.Minute

// writtenObject is one write: the object as written (nil for a clique deleted), the
// resourceVersion the apiserver gave it ("" for a delete), the versions it is newer than, and
// when it was made.
type writtenObject[T any] struct {
	obj     T
	version string
	older   sets.Set[string]
	at      time.Time
}

// newRecord returns the record of a write of obj at version, over the versions replaced and
// those prev (the previous record, or nil) was over or at.
func newRecord[T any](obj T, version string, prev *writtenObject[T], replaced ...string) *writtenObject[T] {
	rec := &writtenObject[T]{obj: obj, version: version, older: sets.New(replaced...), at: time.Now()}
	if prev != nil {
		rec.older = rec.older.Union(prev.older)
		if prev.version != "" {
			rec.older.Insert(prev.version)
		}
	}
	return rec
}

func newWritten() *written {
	return &written{domains: map[types.NamespacedName]*writtenDomain{}}
}

// domain returns cd's record, a new one when there is none or it was another domain's of the
// same name. Making a record first drops the records that hold nothing still trusted (expired):
// a status write that ends after its domain was deleted and forgotten records it again, and
// nothing would forget it a second time. Callers hold w.mu.
func (w *written) domain(cd *cdv1beta1.ComputeDomain) *writtenDomain {
	key := types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name}
	d := w.domains[key]
	if d == nil || d.uid != cd.UID {
		w.dropExpired()
		d = &writtenDomain{uid: cd.UID, cliques: map[string]*writtenObject[*cdv1beta1.ComputeDomainClique]{}}
		w.domains[key] = d
	}
	return d
}

// existing returns cd's record, or nil when there is none for this domain: for dropping what is
// remembered without making a record to drop it from. Callers hold w.mu.
func (w *written) existing(cd *cdv1beta1.ComputeDomain) *writtenDomain {
	d := w.domains[types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name}]
	if d == nil || d.uid != cd.UID {
		return nil
	}
	return d
}

// dropExpired drops the domains whose every remembered write is older than writtenTTL: none of
// them would be read over the cache again. It runs when a domain's record is made, so that the
// records kept are bounded by the domains written in the last writtenTTL. Callers hold w.mu.
func (w *written) dropExpired() {
	for key, d := range w.domains {
		if d.status != nil && time.Since(d.status.at) <= writtenTTL {
			continue
		}
		live := false
		for _, rec := range d.cliques {
			if time.Since(rec.at) <= writtenTTL {
				live = true
				break
			}
		}
		if !live {
			delete(w.domains, key)
		}
	}
}

// forget drops what was remembered of the domain key (deleted, or finalized).
func (w *written) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.domains, key)
}

// lagging reports whether a cached object at version cached (exists: whether the cache holds
// it) is older than rec, the write remembered.
func lagging[T any](rec *writtenObject[T], cached string, exists bool) bool {
	if time.Since(rec.at) > writtenTTL {
		return false
	}
	if !exists {
		return rec.older.Has("")
	}
	return cached != rec.version && rec.older.Has(cached)
}

// cliques returns the domain's cliques as this controller last knows them: each as cached,
// unless the cache has not yet seen this controller's last write of it; then as written.
// Records the cache caught up with, or that someone else's write overtook, are dropped.
func (w *written) cliques(cd *cdv1beta1.ComputeDomain, cached []cdv1beta1.ComputeDomainClique) []cdv1beta1.ComputeDomainClique {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.existing(cd)
	if d == nil || len(d.cliques) == 0 {
		return cached
	}
	out := make([]cdv1beta1.ComputeDomainClique, 0, len(cached)+len(d.cliques))
	seen := sets.New[string]()
	for i := range cached {
		c := &cached[i]
		seen.Insert(c.Name)
		rec, ok := d.cliques[c.Name]
		switch {
		case !ok:
			out = append(out, *c)
		case lagging(rec, c.ResourceVersion, true):
			if rec.obj != nil { // nil: deleted, the cache has not seen it go
				out = append(out, *rec.obj)
			}
		default:
			delete(d.cliques, c.Name)
			out = append(out, *c)
		}
	}
	for name, rec := range d.cliques {
		if seen.Has(name) {
			continue
		}
		if rec.obj != nil && lagging(rec, "", false) {
			out = append(out, *rec.obj) // created, not yet in the cache
		} else {
			delete(d.cliques, name) // deleted (by this controller, or since by someone else)
		}
	}
	return out
}

// wroteClique remembers c as written at c.ResourceVersion, over the version the pass found
// (replaced: its ResourceVersion, or "" when there was none) and the writes it remembered.
func (w *written) wroteClique(cd *cdv1beta1.ComputeDomain, c *cdv1beta1.ComputeDomainClique, replaced string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.domain(cd)
	d.cliques[c.Name] = newRecord(c, c.ResourceVersion, d.cliques[c.Name], replaced)
}

// deletedClique remembers that the clique name, found at version replaced, was deleted.
func (w *written) deletedClique(cd *cdv1beta1.ComputeDomain, name, replaced string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.domain(cd)
	d.cliques[name] = newRecord[*cdv1beta1.ComputeDomainClique](nil, "", d.cliques[name], replaced)
}

// unknownClique drops what was remembered of a clique whose write or delete ended without an
// answer saying what the apiserver holds: the cache is the best knowledge again.
func (w *written) unknownClique(cd *cdv1beta1.ComputeDomain, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := w.existing(cd); d != nil {
		delete(d.cliques, name)
	}
}

// status returns the domain's status as this controller last knows it: as cached, unless the
// cache has not yet seen this controller's last status write.
func (w *written) status(cd *cdv1beta1.ComputeDomain) cdv1beta1.ComputeDomainStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.existing(cd)
	if d == nil || d.status == nil {
		return cd.Status
	}
	if lagging(d.status, cd.ResourceVersion, true) {
		return *d.status.obj
	}
	d.status = nil
	return cd.Status
}

// wroteStatus remembers st as written at version, over the domain's versions replaced (the
// one the pass found in the cache, and any its own writes before the status made).
func (w *written) wroteStatus(cd *cdv1beta1.ComputeDomain, st cdv1beta1.ComputeDomainStatus, version string, replaced ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.domain(cd)
	d.status = newRecord(&st, version, d.status, replaced...)
}

// unknownStatus drops the remembered status of cd (a write that ended without an answer).
func (w *written) unknownStatus(cd *cdv1beta1.ComputeDomain) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := w.existing(cd); d != nil {
		d.status = nil
	}
}
