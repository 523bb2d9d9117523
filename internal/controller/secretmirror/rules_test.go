package secretmirror

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	cdv1beta1 "cdplane/api/v1beta1"
)

const (
	srcNS = "plane-a-driver"
	pl    = cdv1beta1.ControlPlaneLabel
)

var mirrorSel = labels.SelectorFromSet(labels.Set{"mirror": "yes"})

func planeOpts() Options {
	return Options{ControlPlaneID: "plane-a", SourceNamespace: srcNS, SecretSelector: mirrorSel}
}

func legacyOpts(sel labels.Selector) Options {
	return Options{SourceNamespace: srcNS, SecretSelector: mirrorSel, LegacyNamespaceSelector: sel}
}

func makeSource(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: srcNS, UID: k8stypes.UID("uid-" + name), Labels: map[string]string{"mirror": "yes"}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{},
	}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func ns(name string, l map[string]string) metav1.PartialObjectMetadata {
	return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func TestValidate(t *testing.T) {
	cases := map[string]struct {
		opts    Options
		wantErr string
	}{
		"plane":                          {opts: planeOpts()},
		"legacy without namespaces":      {opts: legacyOpts(nil)},
		"legacy with a selector":         {opts: legacyOpts(labels.SelectorFromSet(labels.Set{"team": "x"}))},
		"bad id":                         {opts: Options{ControlPlaneID: "Plane-A", SourceNamespace: srcNS, SecretSelector: mirrorSel}, wantErr: "must be lowercase"},
		"reserved id":                    {opts: Options{ControlPlaneID: "default", SourceNamespace: srcNS, SecretSelector: mirrorSel}, wantErr: "reserved"},
		"no source namespace":            {opts: Options{SecretSelector: mirrorSel}, wantErr: "source namespace is required"},
		"bad source namespace":           {opts: Options{SourceNamespace: "Ns_1", SecretSelector: mirrorSel}, wantErr: "invalid source namespace"},
		"no selector":                    {opts: Options{SourceNamespace: srcNS}, wantErr: "non-empty Secret selector"},
		"empty selector":                 {opts: Options{SourceNamespace: srcNS, SecretSelector: labels.Everything()}, wantErr: "non-empty Secret selector"},
		"nothing selector":               {opts: Options{SourceNamespace: srcNS, SecretSelector: labels.Nothing()}, wantErr: "non-empty Secret selector"},
		"namespace selector on a plane":  {opts: Options{ControlPlaneID: "plane-a", SourceNamespace: srcNS, SecretSelector: mirrorSel, LegacyNamespaceSelector: labels.Everything()}, wantErr: "legacy plane only"},
		"negative foreign recheck":       {opts: Options{SourceNamespace: srcNS, SecretSelector: mirrorSel, ForeignRecheckInterval: -time.Second}, wantErr: "must not be negative"},
		"negative resync":                {opts: Options{SourceNamespace: srcNS, SecretSelector: mirrorSel, ResyncInterval: -time.Second}, wantErr: "resync interval must be positive"},
		"unset resync takes the default": {opts: Options{SourceNamespace: srcNS, SecretSelector: mirrorSel}},
		"legacy with everything allowed": {opts: legacyOpts(labels.Everything())},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.opts)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("New() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	o := planeOpts()
	o.Defaults()
	want := planeOpts()
	want.FieldManager, want.ForeignRecheckInterval, want.ResyncInterval = DefaultFieldManager, DefaultForeignRecheckInterval, DefaultResyncInterval
	if diff := cmp.Diff(want, o, cmp.Comparer(func(a, b labels.Selector) bool {
		return (a == nil) == (b == nil) && (a == nil || a.String() == b.String())
	})); diff != "" {
		t.Errorf("Defaults (-want +got):\n%s", diff)
	}
	// Zero is not a valid interval: only Defaults makes it one.
	zero := planeOpts()
	if err := zero.Validate(); err == nil || !strings.Contains(err.Error(), "resync interval") {
		t.Errorf("Validate with a zero resync interval = %v, want an error", err)
	}
}

// TestCacheByObject: the only Secrets cached are the selected ones of the source namespace, so
// the controller needs no cluster-wide list or watch on Secrets.
func TestCacheByObject(t *testing.T) {
	for name, o := range map[string]Options{"plane": planeOpts(), "legacy": legacyOpts(labels.Everything())} {
		t.Run(name, func(t *testing.T) {
			var secrets, namespaces int
			for obj, c := range CacheByObject(o) {
				switch obj.(type) {
				case *corev1.Secret:
					secrets++
					if len(c.Namespaces) != 1 {
						t.Errorf("Secrets cached in %d namespace configs, want only the source namespace", len(c.Namespaces))
					}
					cfg, ok := c.Namespaces[srcNS]
					if !ok {
						t.Fatalf("Secrets not cached in the source namespace: %v", c.Namespaces)
					}
					if cfg.LabelSelector == nil || cfg.LabelSelector.String() != SourceSelector(o).String() {
						t.Errorf("source Secrets selected by %v, want %v", cfg.LabelSelector, SourceSelector(o))
					}
					if c.Label != nil || c.Field != nil {
						t.Errorf("Secret cache has a cluster-wide label or field selector: %v %v", c.Label, c.Field)
					}
				default:
					namespaces++
					if len(c.Namespaces) != 0 || c.Label.String() != NamespaceSelector(o).String() {
						t.Errorf("namespace cache: namespaces %v, label %v; want all, %v", c.Namespaces, c.Label, NamespaceSelector(o))
					}
				}
			}
			if secrets != 1 || namespaces != 1 {
				t.Errorf("CacheByObject has %d Secret and %d namespace entries, want one each", secrets, namespaces)
			}
		})
	}
}

func TestNextCheck(t *testing.T) {
	o := planeOpts()
	o.Defaults()
	shortForeign := o
	shortForeign.ForeignRecheckInterval, shortForeign.ResyncInterval = time.Second, time.Minute
	longForeign := o
	longForeign.ForeignRecheckInterval, longForeign.ResyncInterval = time.Hour, time.Minute
	cases := map[string]struct {
		opts            Options
		wanted, foreign bool
		want            time.Duration
	}{
		"mirrored source: resync":                  {opts: o, wanted: true, want: DefaultResyncInterval},
		"foreign target: the recheck, sooner":      {opts: o, wanted: true, foreign: true, want: DefaultForeignRecheckInterval},
		"short foreign recheck":                    {opts: shortForeign, wanted: true, foreign: true, want: time.Second},
		"foreign recheck longer than the resync":   {opts: longForeign, wanted: true, foreign: true, want: time.Minute},
		"source gone: never":                       {opts: o},
		"source gone, foreign copy refused: never": {opts: o, foreign: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := NextCheck(tc.opts, tc.wanted, tc.foreign); got != tc.want {
				t.Errorf("NextCheck = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestClassifyNamespaceEvent(t *testing.T) {
	now := metav1.Now()
	target := ns("t", map[string]string{pl: "plane-a"})
	relabelled := ns("t", map[string]string{pl: "plane-a", "team": "x"})
	terminating := ns("t", map[string]string{pl: "plane-a"})
	terminating.DeletionTimestamp = &now
	source := ns(srcNS, map[string]string{pl: "plane-a"})
	team := labels.SelectorFromSet(labels.Set{"team": "x"})
	legacyIn := ns("l", map[string]string{"team": "x"})
	legacyAnnotated := ns("l", map[string]string{"team": "x"})
	legacyAnnotated.Annotations = map[string]string{"a": "b"}
	legacyRelabelled := ns("l", map[string]string{"team": "x", "other": "y"})
	cases := map[string]struct {
		opts     Options
		old, cur *metav1.PartialObjectMetadata
		want     NamespaceChange
	}{
		"target listed or created":              {opts: planeOpts(), cur: &target, want: NamespaceJoined},
		"target relabelled, still a target":     {opts: planeOpts(), old: &target, cur: &relabelled, want: NamespaceJoined},
		"target resynced unchanged":             {opts: planeOpts(), old: &target, cur: &target, want: NamespaceUnchanged},
		"gone from the label-scoped cache":      {opts: planeOpts(), old: &target, want: NamespaceLeft},
		"starts terminating":                    {opts: planeOpts(), old: &target, cur: &terminating, want: NamespaceLeft},
		"listed terminating":                    {opts: planeOpts(), cur: &terminating, want: NamespaceUnchanged},
		"source namespace listed":               {opts: planeOpts(), cur: &source, want: NamespaceUnchanged},
		"source namespace gone from the cache":  {opts: planeOpts(), old: &source, want: NamespaceLeft},
		"legacy target listed":                  {opts: legacyOpts(team), cur: &legacyIn, want: NamespaceJoined},
		"legacy target, only annotations moved": {opts: legacyOpts(team), old: &legacyIn, cur: &legacyAnnotated, want: NamespaceUnchanged},
		"legacy target relabelled":              {opts: legacyOpts(team), old: &legacyIn, cur: &legacyRelabelled, want: NamespaceJoined},
		"legacy namespace stops matching":       {opts: legacyOpts(team), old: &legacyIn, want: NamespaceLeft},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var old, cur metav1.Object
			if tc.old != nil {
				old = tc.old
			}
			if tc.cur != nil {
				cur = tc.cur
			}
			if got := ClassifyNamespaceEvent(tc.opts, old, cur); got != tc.want {
				t.Errorf("ClassifyNamespaceEvent = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestOwnsCopy(t *testing.T) {
	cases := map[string]struct {
		id     string
		labels map[string]string
		want   bool
	}{
		"plane marker":                       {id: "plane-a", labels: map[string]string{MirroredFromLabel: srcNS, pl: "plane-a"}, want: true},
		"plane marker and other labels":      {id: "plane-a", labels: map[string]string{MirroredFromLabel: srcNS, pl: "plane-a", "x": "y"}, want: true},
		"another plane":                      {id: "plane-a", labels: map[string]string{MirroredFromLabel: srcNS, pl: "plane-b"}},
		"plane label without mirror label":   {id: "plane-a", labels: map[string]string{pl: "plane-a"}},
		"mirror label without plane label":   {id: "plane-a", labels: map[string]string{MirroredFromLabel: srcNS}},
		"another source namespace":           {id: "plane-a", labels: map[string]string{MirroredFromLabel: "other", pl: "plane-a"}},
		"no labels":                          {id: "plane-a"},
		"legacy marker":                      {id: "", labels: map[string]string{MirroredFromLabel: srcNS}, want: true},
		"legacy: a plane's copy is not ours": {id: "", labels: map[string]string{MirroredFromLabel: srcNS, pl: "plane-a"}},
		"legacy: empty plane label counts":   {id: "", labels: map[string]string{MirroredFromLabel: srcNS, pl: ""}},
		"legacy: another source namespace":   {id: "", labels: map[string]string{MirroredFromLabel: "other"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := OwnsCopy(tc.id, srcNS, tc.labels); got != tc.want {
				t.Errorf("OwnsCopy(%q, %v) = %v, want %v", tc.id, tc.labels, got, tc.want)
			}
			// The cache selector agrees with the ownership rule.
			o := Options{ControlPlaneID: tc.id, SourceNamespace: srcNS}
			if got := CopySelector(o).Matches(labels.Set(tc.labels)); got != tc.want {
				t.Errorf("CopySelector(%q) matches %v = %v, want %v", tc.id, tc.labels, got, tc.want)
			}
		})
	}
}

func TestOwnsNamespace(t *testing.T) {
	team := labels.SelectorFromSet(labels.Set{"team": "x"})
	now := metav1.Now()
	terminating := ns("t", map[string]string{pl: "plane-a"})
	terminating.DeletionTimestamp = &now
	cases := map[string]struct {
		opts Options
		ns   metav1.PartialObjectMetadata
		want bool
	}{
		"assigned to the plane":              {opts: planeOpts(), ns: ns("a", map[string]string{pl: "plane-a"}), want: true},
		"assigned to another plane":          {opts: planeOpts(), ns: ns("a", map[string]string{pl: "plane-b"})},
		"prefix of another plane's id":       {opts: planeOpts(), ns: ns("a", map[string]string{pl: "plane-a-x"})},
		"unassigned":                         {opts: planeOpts(), ns: ns("a", nil)},
		"the source namespace":               {opts: planeOpts(), ns: ns(srcNS, map[string]string{pl: "plane-a"})},
		"terminating":                        {opts: planeOpts(), ns: terminating},
		"legacy without selector":            {opts: legacyOpts(nil), ns: ns("a", map[string]string{"team": "x"})},
		"legacy with nothing selector":       {opts: legacyOpts(labels.Nothing()), ns: ns("a", map[string]string{"team": "x"})},
		"legacy, matching":                   {opts: legacyOpts(team), ns: ns("a", map[string]string{"team": "x"}), want: true},
		"legacy, not matching":               {opts: legacyOpts(team), ns: ns("a", map[string]string{"team": "y"})},
		"legacy, matching but assigned":      {opts: legacyOpts(team), ns: ns("a", map[string]string{"team": "x", pl: "plane-a"})},
		"legacy, everything but assigned":    {opts: legacyOpts(labels.Everything()), ns: ns("a", map[string]string{pl: "plane-a"})},
		"legacy, everything and unassigned":  {opts: legacyOpts(labels.Everything()), ns: ns("a", nil), want: true},
		"legacy, source namespace selected":  {opts: legacyOpts(team), ns: ns(srcNS, map[string]string{"team": "x"})},
		"legacy, empty plane label assigned": {opts: legacyOpts(team), ns: ns("a", map[string]string{"team": "x", pl: ""})},
		"legacy, kube-system selected":       {opts: legacyOpts(labels.Everything()), ns: ns("kube-system", nil)},
		"legacy, kube-public selected":       {opts: legacyOpts(team), ns: ns("kube-public", map[string]string{"team": "x"})},
		"assigned, but a kube-* name":        {opts: planeOpts(), ns: ns("kube-tenant", map[string]string{pl: "plane-a"})},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := OwnsNamespace(tc.opts, &tc.ns); got != tc.want {
				t.Errorf("OwnsNamespace(%s) = %v, want %v", tc.ns.Name, got, tc.want)
			}
			// The cache selector never admits a namespace the rule refuses for its labels (names
			// are the rule's alone: a selector cannot say "kube-*").
			if tc.ns.Name != srcNS && tc.ns.DeletionTimestamp == nil && !strings.HasPrefix(tc.ns.Name, "kube-") {
				if got := NamespaceSelector(tc.opts).Matches(labels.Set(tc.ns.Labels)); got != tc.want {
					t.Errorf("NamespaceSelector matches %v = %v, want %v", tc.ns.Labels, got, tc.want)
				}
			}
		})
	}
}

func TestSelectorsSurviveTheWire(t *testing.T) {
	// Selectors travel to the apiserver as strings: parsing them back must select the same.
	cases := map[string]struct {
		sel   labels.Selector
		match map[string]string
		miss  map[string]string
	}{
		"plane namespaces":  {sel: NamespaceSelector(planeOpts()), match: map[string]string{pl: "plane-a"}, miss: map[string]string{pl: "plane-b"}},
		"legacy namespaces": {sel: NamespaceSelector(legacyOpts(labels.SelectorFromSet(labels.Set{"team": "x"}))), match: map[string]string{"team": "x"}, miss: map[string]string{"team": "x", pl: "plane-a"}},
		"legacy, none":      {sel: NamespaceSelector(legacyOpts(nil)), miss: map[string]string{}},
		"legacy, none (2)":  {sel: NamespaceSelector(legacyOpts(nil)), miss: map[string]string{pl: "plane-a"}},
		"plane copies":      {sel: CopySelector(planeOpts()), match: map[string]string{MirroredFromLabel: srcNS, pl: "plane-a"}, miss: map[string]string{MirroredFromLabel: srcNS}},
		"legacy copies":     {sel: CopySelector(legacyOpts(nil)), match: map[string]string{MirroredFromLabel: srcNS}, miss: map[string]string{MirroredFromLabel: srcNS, pl: "plane-a"}},
		"no sources":        {sel: SourceSelector(Options{SourceNamespace: srcNS}), miss: map[string]string{"mirror": "yes"}},
		"sources":           {sel: SourceSelector(planeOpts()), match: map[string]string{"mirror": "yes"}, miss: map[string]string{"mirror": "no"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := tc.sel.String()
			if s == "" {
				t.Fatal("selector serialises as the empty string, which selects everything")
			}
			parsed, err := labels.Parse(s)
			if err != nil {
				t.Fatalf("parsing %q: %v", s, err)
			}
			for _, sel := range []labels.Selector{tc.sel, parsed} {
				if tc.match != nil && !sel.Matches(labels.Set(tc.match)) {
					t.Errorf("%q does not match %v", sel, tc.match)
				}
				if sel.Matches(labels.Set(tc.miss)) {
					t.Errorf("%q matches %v", sel, tc.miss)
				}
			}
		})
	}
}

func TestWanted(t *testing.T) {
	now := metav1.Now()
	deleting := makeSource("s", nil)
	deleting.DeletionTimestamp = &now
	token := makeSource("s", nil)
	token.Type = corev1.SecretTypeServiceAccountToken
	bootstrap := makeSource("s", nil)
	bootstrap.Type = corev1.SecretTypeBootstrapToken
	unlabelled := makeSource("s", nil)
	unlabelled.Labels = nil
	elsewhere := makeSource("s", nil)
	elsewhere.Namespace = "other"
	cases := map[string]struct {
		src  *corev1.Secret
		want bool
	}{
		"matching":               {src: makeSource("s", nil), want: true},
		"gone":                   {src: nil},
		"being deleted":          {src: deleting},
		"service-account token":  {src: token},
		"bootstrap token":        {src: bootstrap},
		"not matching":           {src: unlabelled},
		"not in source namepace": {src: elsewhere},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Wanted(planeOpts(), tc.src); got != tc.want {
				t.Errorf("Wanted = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDesiredCopy(t *testing.T) {
	src := makeSource("creds", map[string]string{"token": "abc"})
	cases := map[string]struct {
		opts Options
		want *corev1.Secret
	}{
		"plane copy carries the plane label": {
			opts: planeOpts(),
			want: &corev1.Secret{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
				ObjectMeta: metav1.ObjectMeta{
					Name: "creds", Namespace: "team-1",
					Labels:      map[string]string{MirroredFromLabel: srcNS, pl: "plane-a"},
					Annotations: map[string]string{SourceAnnotation: srcNS + "/creds", SourceUIDAnnotation: "uid-creds"},
				},
				Type: corev1.SecretTypeOpaque,
				Data: map[string][]byte{"token": []byte("abc")},
			},
		},
		"legacy copy carries no plane label": {
			opts: legacyOpts(nil),
			want: &corev1.Secret{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
				ObjectMeta: metav1.ObjectMeta{
					Name: "creds", Namespace: "team-1",
					Labels:      map[string]string{MirroredFromLabel: srcNS},
					Annotations: map[string]string{SourceAnnotation: srcNS + "/creds", SourceUIDAnnotation: "uid-creds"},
				},
				Type: corev1.SecretTypeOpaque,
				Data: map[string][]byte{"token": []byte("abc")},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := DesiredCopy(tc.opts, src, "team-1")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DesiredCopy (-want +got):\n%s", diff)
			}
			if !OwnsCopy(tc.opts.ControlPlaneID, srcNS, got.Labels) {
				t.Error("the plane does not own its own copy")
			}
		})
	}
	// The copy does not share the source's data.
	got := DesiredCopy(planeOpts(), src, "team-1")
	got.Data["token"][0] = 'X'
	if string(src.Data["token"]) != "abc" {
		t.Error("DesiredCopy shares the source's data")
	}
}

func TestUpToDateAndReplace(t *testing.T) {
	desired := DesiredCopy(planeOpts(), makeSource("creds", map[string]string{"token": "abc"}), "team-1")
	with := func(f func(s *corev1.Secret)) *corev1.Secret {
		s := desired.DeepCopy()
		s.ResourceVersion = "7"
		f(s)
		return s
	}
	cases := map[string]struct {
		cur                   *corev1.Secret
		upToDate, needReplace bool
	}{
		"equal":                        {cur: with(func(*corev1.Secret) {}), upToDate: true},
		"extra labels and annotations": {cur: with(func(s *corev1.Secret) { s.Labels["x"] = "y"; s.Annotations["a"] = "b" }), upToDate: true},
		"empty type means Opaque":      {cur: with(func(s *corev1.Secret) { s.Type = "" }), upToDate: true},
		"data changed":                 {cur: with(func(s *corev1.Secret) { s.Data["token"] = []byte("tampered") })},
		"key added":                    {cur: with(func(s *corev1.Secret) { s.Data["extra"] = []byte("x") })},
		"key removed":                  {cur: with(func(s *corev1.Secret) { delete(s.Data, "token") })},
		"source uid changed":           {cur: with(func(s *corev1.Secret) { s.Annotations[SourceUIDAnnotation] = "old" })},
		"marker changed":               {cur: with(func(s *corev1.Secret) { s.Labels[pl] = "plane-b" })},
		"type changed":                 {cur: with(func(s *corev1.Secret) { s.Type = corev1.SecretTypeTLS }), needReplace: true},
		"immutable, data changed": {cur: with(func(s *corev1.Secret) {
			s.Immutable = ptr.To(true)
			s.Data["token"] = []byte("old")
		}), needReplace: true},
		"immutable, data equal": {cur: with(func(s *corev1.Secret) { s.Immutable = ptr.To(true) }), upToDate: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := UpToDate(tc.cur, desired); got != tc.upToDate {
				t.Errorf("UpToDate = %v, want %v", got, tc.upToDate)
			}
			if got := NeedsReplace(tc.cur, desired); got != tc.needReplace {
				t.Errorf("NeedsReplace = %v, want %v", got, tc.needReplace)
			}
			if tc.needReplace {
				return
			}
			applied := ApplyTo(tc.cur, desired)
			if !UpToDate(applied, desired) {
				t.Errorf("ApplyTo does not bring the copy up to date: %+v", applied)
			}
			if applied.ResourceVersion != "7" {
				t.Errorf("ApplyTo dropped the resourceVersion: %q", applied.ResourceVersion)
			}
			for k, v := range tc.cur.Labels {
				if _, ours := desired.Labels[k]; !ours && applied.Labels[k] != v {
					t.Errorf("ApplyTo dropped label %s", k)
				}
			}
		})
	}
}

func TestMakePlan(t *testing.T) {
	o := planeOpts()
	src := makeSource("creds", map[string]string{"token": "abc"})
	fresh := func(nsName string) *corev1.Secret { return DesiredCopy(o, src, nsName) }
	stale := func(nsName string) *corev1.Secret {
		c := DesiredCopy(o, src, nsName)
		c.Data["token"] = []byte("old")
		return c
	}
	unlabelled := makeSource("creds", nil)
	unlabelled.Labels = nil
	cases := map[string]struct {
		src     *corev1.Secret
		targets sets.Set[string]
		copies  []*corev1.Secret
		want    Plan
	}{
		"new source is written everywhere, sorted": {
			src: src, targets: sets.New("t3", "t1", "t2"),
			want: Plan{Write: []string{"t1", "t2", "t3"}},
		},
		"up-to-date copies need nothing": {
			src: src, targets: sets.New("t1", "t2"), copies: []*corev1.Secret{fresh("t1"), fresh("t2")},
			want: Plan{},
		},
		"stale copy is rewritten": {
			src: src, targets: sets.New("t1", "t2"), copies: []*corev1.Secret{fresh("t1"), stale("t2")},
			want: Plan{Write: []string{"t2"}},
		},
		"copy outside the targets is deleted": {
			src: src, targets: sets.New("t1"), copies: []*corev1.Secret{fresh("t1"), fresh("gone")},
			want: Plan{Delete: []string{"gone"}},
		},
		"source deleted: every copy goes": {
			src: nil, targets: sets.New("t1", "t2"), copies: []*corev1.Secret{fresh("t2"), fresh("t1")},
			want: Plan{Delete: []string{"t1", "t2"}},
		},
		"source no longer selected: every copy goes": {
			src: unlabelled, targets: sets.New("t1"), copies: []*corev1.Secret{fresh("t1")},
			want: Plan{Delete: []string{"t1"}},
		},
		"no targets, no copies": {
			src: src, want: Plan{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := MakePlan(o, tc.src, tc.targets, tc.copies)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("MakePlan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTargets(t *testing.T) {
	nss := []metav1.PartialObjectMetadata{
		ns("t1", map[string]string{pl: "plane-a"}),
		ns(srcNS, map[string]string{pl: "plane-a"}),
		ns("t2", map[string]string{pl: "plane-b"}),
		ns("t3", map[string]string{pl: "plane-a", "team": "x"}),
	}
	if diff := cmp.Diff(sets.List(sets.New("t1", "t3")), sets.List(Targets(planeOpts(), nss))); diff != "" {
		t.Errorf("Targets (-want +got):\n%s", diff)
	}
	if got := Targets(legacyOpts(nil), nss); got.Len() != 0 {
		t.Errorf("the legacy plane without a selector has targets %v", sets.List(got))
	}
}

// FuzzSelectors: the Secret and namespace selectors come from the controller's flags
// (--secret-mirror-selector, --secret-mirror-namespace-selector), parsed with labels.Parse as
// the controller parses them. Whatever they say, options that validate give cache selectors
// that survive the wire (serialised, never as the empty string that selects everything, and
// parsed back to the same selector, matching the same label sets), and that agree with the
// decisions made in code on fresh reads: the namespace selector with OwnsNamespace (so never a
// namespace of another plane, nor for the legacy plane one with a plane label), the copy
// selector with OwnsCopy, and the source selector with the Secret selector.
func FuzzSelectors(f *testing.F) {
	for _, seed := range []struct {
		secret, namespace string
		plane             bool
	}{
		{"mirror=yes", "", true}, {"mirror=yes", "team=x", false}, {"mirror=yes", "", false},
		{"", "", false}, {"!mirror", "", true}, {"mirror in ()", "", false}, {"a,b", "!c", false},
		{"x notin (a,b)", "team in (x,y)", false}, {"a>1", "b<2", false}, {"mirror=yes", pl + "=plane-a", false},
		{"mirror=yes", pl, false}, {"mirror=yes", "!" + pl, false}, {pl + "=plane-b", "", true},
		{MirroredFromLabel + "=" + srcNS, "", true}, {"a=", "b==", false}, {"a!=", "", true}, {"mirror=yes", "a,a", false},
	} {
		f.Add(seed.secret, seed.namespace, seed.plane)
	}
	f.Fuzz(func(t *testing.T, secretSel, namespaceSel string, withID bool) {
		o := Options{SourceNamespace: srcNS}
		if withID {
			o.ControlPlaneID = "plane-a"
		}
		var err error
		if o.SecretSelector, err = labels.Parse(secretSel); err != nil {
			return // the controller refuses the flag
		}
		if namespaceSel != "" {
			if o.LegacyNamespaceSelector, err = labels.Parse(namespaceSel); err != nil {
				return
			}
		}
		o.Defaults()
		if o.Validate() != nil {
			return
		}
		source, namespaces, copies := SourceSelector(o), NamespaceSelector(o), CopySelector(o)
		samples := labelSamples(o.SecretSelector, o.LegacyNamespaceSelector)
		for name, sel := range map[string]labels.Selector{"source": source, "namespace": namespaces, "copy": copies} {
			wire := sel.String()
			if wire == "" {
				t.Fatalf("the %s selector serialises as the empty string, which selects everything", name)
			}
			parsed, err := labels.Parse(wire)
			if err != nil {
				t.Fatalf("the %s selector %q does not parse: %v", name, wire, err)
			}
			if parsed.String() != wire {
				t.Fatalf("the %s selector %q parses to %q", name, wire, parsed.String())
			}
			for _, l := range samples {
				if sel.Matches(l) != parsed.Matches(l) {
					t.Fatalf("the %s selector %q matches %v: %v; parsed from the wire: %v", name, wire, l, sel.Matches(l), parsed.Matches(l))
				}
			}
		}
		for _, l := range samples {
			if got, want := namespaces.Matches(l), OwnsNamespace(o, &metav1.ObjectMeta{Name: "team", Labels: l}); got != want {
				t.Fatalf("namespace labels %v: the cache selector %q matches: %v; OwnsNamespace: %v", l, namespaces, got, want)
			}
			if id, labelled := l[pl]; namespaces.Matches(l) && (labelled != (o.ControlPlaneID != "") || id != o.ControlPlaneID) {
				t.Fatalf("the namespace selector %q of plane %q selects a namespace labelled %v", namespaces, o.ControlPlaneID, l)
			}
			if got, want := copies.Matches(l), OwnsCopy(o.ControlPlaneID, srcNS, l); got != want {
				t.Fatalf("Secret labels %v: the copy selector %q matches: %v; OwnsCopy: %v", l, copies, got, want)
			}
			if source.Matches(l) && !o.SecretSelector.Matches(l) {
				t.Fatalf("the source selector %q matches %v, which the Secret selector %q does not", source, l, o.SecretSelector)
			}
		}
	})
}

// labelSamples returns label sets that exercise the requirements of sels (nil ones skipped):
// each key absent, at each of its values and at another value, combined across keys (a bounded
// number of them), each with the plane label absent, empty, plane-a's and plane-b's, and the
// mirror marker absent, this source's and another's.
func labelSamples(sels ...labels.Selector) []labels.Set {
	const maxBase = 64
	base := []labels.Set{{}}
	for _, sel := range sels {
		if sel == nil {
			continue
		}
		reqs, _ := sel.Requirements()
		for _, r := range reqs {
			values := append(slices.Sorted(maps.Keys(r.Values())), "zz", "")
			var next []labels.Set
			for _, b := range base {
				next = append(next, b)
				for _, v := range values {
					if len(next) >= maxBase {
						break
					}
					s := maps.Clone(b)
					s[r.Key()] = v
					next = append(next, s)
				}
			}
			base = next
		}
	}
	var out []labels.Set
	for _, b := range base {
		for _, planeLabel := range []*string{nil, ptr.To(""), ptr.To("plane-a"), ptr.To("plane-b")} {
			for _, marker := range []*string{nil, ptr.To(srcNS), ptr.To("elsewhere")} {
				s := maps.Clone(b)
				if planeLabel != nil {
					s[pl] = *planeLabel
				}
				if marker != nil {
					s[MirroredFromLabel] = *marker
				}
				out = append(out, s)
			}
		}
	}
	return out
}
