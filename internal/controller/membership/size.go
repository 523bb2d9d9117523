package membership

import (
	"strconv"

	"k8s.io/apimachinery/pkg/util/sets"

	cdv1beta1 "cdplane/api/v1beta1"
)

// What one status entry costs in the stored ComputeDomain, as JSON (CRDs are stored as JSON)
// plus the entry server-side apply records for it in metadata.managedFields where status.nodes
// is a map-typed list. This release's CRD makes it atomic (no such entry), but the estimate
// keeps the map's cost: a controller may run against an older CRD, or NVIDIA's, until the
// prerequisites are upgraded, and the bound must hold there too. The figures are upper bounds
// of the measured ones (test/integration/controller, TestStatusSizeMeasured):
//
//	{"cliqueID":"","index":,"ipAddress":"","name":"","status":""},           62 bytes
//	"k:{\"name\":\"\"}":{".":{},"f:cliqueID":{},"f:index":{},
//	  "f:ipAddress":{},"f:name":{},"f:status":{}},                           100 bytes
//
// and of one clique summary {"id":"","ready":,"total":}, with "k:{\"id\":\"\"}":{".":{},
// "f:id":{},"f:ready":{},"f:total":{}}.
const (
	entryOverhead   = 62 + 100 + 16 // the 16: slack
	summaryOverhead = 28 + 62 + 16 + 2*10
	// conditionsAllowance covers the conditions this controller writes (their messages list
	// at most maxNamesInMessage names) and their managed fields.
	conditionsAllowance = 16 << 10
)

// EntryBytes estimates what one status.nodes entry costs in the stored ComputeDomain, managed
// fields included: its name appears twice (the entry, and the key of its managed-fields entry).
func EntryBytes(e Entry) int {
	st := max(len(e.Status), len(cdv1beta1.StatusNotReady)) // an empty status is defaulted
	return entryOverhead + 2*len(e.NodeName) + len(e.IPAddress) + len(e.CliqueID) + len(strconv.Itoa(e.Index)) + st
}

// SummaryBytes estimates what one status.cliques entry costs, managed fields included.
func SummaryBytes(cliqueID string) int {
	return summaryOverhead + 2*len(cliqueID)
}

// budget adds up the estimated size of a status: entries, their cliques' summaries and the
// conditions allowance.
type budget struct {
	entries int
	bytes   int
	cliques sets.Set[string]
}

func newBudget() *budget {
	return &budget{bytes: conditionsAllowance, cliques: sets.New[string]()}
}

func (b *budget) cost(e Entry) int {
	c := EntryBytes(e)
	if !b.cliques.Has(e.CliqueID) {
		c += SummaryBytes(e.CliqueID)
	}
	return c
}

// fits reports whether e can be added without passing MaxStatusNodes or MaxStatusBytes.
func (b *budget) fits(e Entry) bool {
	return b.entries < cdv1beta1.MaxStatusNodes && b.bytes+b.cost(e) <= cdv1beta1.MaxStatusBytes
}

func (b *budget) add(e Entry) {
	b.bytes += b.cost(e)
	b.entries++
	b.cliques.Insert(e.CliqueID)
}

// addSummary counts a clique's summary without an entry.
func (b *budget) addSummary(cliqueID string) {
	if !b.cliques.Has(cliqueID) {
		b.bytes += SummaryBytes(cliqueID)
		b.cliques.Insert(cliqueID)
	}
}

func (b *budget) within() bool {
	return b.entries <= cdv1beta1.MaxStatusNodes && b.bytes <= cdv1beta1.MaxStatusBytes
}
