package status

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func samplePlanes() Planes {
	acq := testNow.Add(-(3*time.Hour + 2*time.Minute))
	return Planes{ObservedAt: testNow, Planes: []Plane{
		{
			Legacy: true, Installed: true, DriverNamespace: "cdplane", Version: "v0.4.0", Controller: Replicas{Desired: 1, Ready: 1},
			Nodes: 2, NodesPluginReady: 2, NodesCountedBy: CountedByKubeletPlugin, Namespaces: 1, NamespacesCountedBy: CountedByDomains,
			Domains: DomainCounts{Ready: 1},
			Leader:  &Leader{Lease: "cdplane-controller", Election: true, Holder: "cdplane-controller-6f7d9-x2k4q", AcquireTime: &acq, AgeSeconds: 3*3600 + 120},
		},
		{
			ID: "a", Installed: true, DriverNamespace: "a-cdplane", Version: "v0.4.0", Controller: Replicas{Desired: 2, Ready: 2},
			Nodes: 18, NodesPluginReady: 17, NodesCountedBy: CountedByLabel, Namespaces: 3, NamespacesCountedBy: CountedByLabel,
			Domains: DomainCounts{Ready: 4, NotReady: 1},
			Leader:  &Leader{Lease: "a-cdplane-controller", Election: true, Holder: "a-cdplane-controller-5c8b7-9qzzt", AcquireTime: &acq, AgeSeconds: 720, Expired: true},
		},
		{ID: "old", DriverNamespace: "old-cdplane", Nodes: 1, NodesCountedBy: CountedByLabel, NamespacesCountedBy: CountedByLabel},
	}}
}

func sampleDomain() Domain {
	return Domain{
		ObservedAt: testNow, Namespace: "team-a", Name: "train", UID: "5f1c", ControlPlaneID: "a", DriverNamespace: "a-cdplane",
		Status: "NotReady", NumNodes: 4, ReadyNodes: 3, TotalNodes: 4, Membership: MembershipCliques,
		Cliques: []Clique{
			{ID: "c.1", Ready: 2, Total: 3, Nodes: []Node{
				{Name: "node-0", Index: 0, Status: "Ready"}, {Name: "node-1", Index: 1, Status: "NotReady"}, {Name: "node-3", Index: 2, Status: ""},
			}},
			{ID: "", Ready: 1, Total: 1, Nodes: []Node{{Name: "node-9", Index: -1, Status: "Ready"}}},
		},
		HeldBack: []HeldBack{{Node: "node-1", Reason: ReasonHostIMEXInUse, Message: "IMEX cannot run: a host nvidia-imex holds it"}},
		Conditions: []Condition{
			{Type: "Ready", Status: "False", Reason: "DaemonsNotReady", Message: "1 of 4 daemons are not ready, on nodes: node-1", LastTransitionTime: testNow},
			{Type: "NodesBlocked", Status: "True", Reason: "HostIMEXInUse", Message: "IMEX cannot run on 1 nodes", LastTransitionTime: testNow},
		},
	}
}

func TestWritePlanesText(t *testing.T) {
	var b bytes.Buffer
	if err := WritePlanesText(&b, samplePlanes(), Options{}); err != nil {
		t.Fatal(err)
	}
	want := `PLANE     VERSION          CONTROLLER  NODES  PLUGIN-READY  NAMESPACES  DOMAINS-READY  DOMAINS-NOT-READY  LEADER                                      LEADER-AGE
(legacy)  v0.4.0           1/1         2      2             1           1              0                  cdplane-controller-6f7d9-x2k4q              3h2m
a         v0.4.0           2/2         18     17            3           4              1                  a-cdplane-controller-5c8b7-9qzzt (expired)  12m
old       (not installed)  -           1      0             0           0              0                  -                                           -
(legacy): NODES counts the nodes running its kubelet plugin, NAMESPACES the namespaces without a plane label that hold its domains.
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestWritePlanesTextLeaders(t *testing.T) {
	cases := map[string]struct {
		leader     *Leader
		wantLeader string
		wantAge    string
	}{
		"election off": {leader: &Leader{Lease: "l"}, wantLeader: "(election off)", wantAge: "-"},
		"no holder":    {leader: &Leader{Lease: "l", Election: true}, wantLeader: "(none)", wantAge: "-"},
		"no acquire":   {leader: &Leader{Lease: "l", Election: true, Holder: "p"}, wantLeader: "p", wantAge: "-"},
		"days":         {leader: &Leader{Lease: "l", Election: true, Holder: "p", AcquireTime: &testNow, AgeSeconds: 3 * 86400}, wantLeader: "p", wantAge: "3d"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			leader, age := leaderCells(tc.leader)
			if leader != tc.wantLeader || age != tc.wantAge {
				t.Errorf("leaderCells = %q, %q; want %q, %q", leader, age, tc.wantLeader, tc.wantAge)
			}
		})
	}
}

func TestWritePlanesTextNone(t *testing.T) {
	var b bytes.Buffer
	if err := WritePlanesText(&b, Planes{}, Options{}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "No control plane found") {
		t.Errorf("got %q", b.String())
	}
}

const domainText = `ComputeDomain team-a/train (uid 5f1c), control plane "a", driver namespace a-cdplane
Status: %sNotReady%s  numNodes: 4  readyNodes: 3  totalNodes: 4  membership: cliques

CLIQUE       READY  NODES
c.1          2/3    %snode-0[0]✓%s %snode-1[1]✗%s %snode-3[2]…%s
(no fabric)  1/1    %snode-9[-]✓%s

Held back (1):
  node-1  HostIMEXInUse  IMEX cannot run: a host nvidia-imex holds it

Conditions:
  TYPE          STATUS  REASON           MESSAGE
  Ready         False   DaemonsNotReady  1 of 4 daemons are not ready, on nodes: node-1
  NodesBlocked  True    HostIMEXInUse    IMEX cannot run on 1 nodes
`

func TestWriteDomainText(t *testing.T) {
	cases := map[string]struct {
		color bool
		want  string
	}{
		"plain": {want: strings.NewReplacer("%s", "").Replace(domainText)},
		"colour": {color: true, want: fmtColors(domainText,
			red, reset, // status
			green, reset, red, reset, yellow, reset, // clique c.1
			green, reset, // no fabric
		)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteDomainText(&b, sampleDomain(), Options{Color: tc.color}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// fmtColors fills the %s of a template in order.
func fmtColors(tmpl string, codes ...string) string {
	parts := strings.Split(tmpl, "%s")
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(p)
		if i < len(codes) {
			b.WriteString(codes[i])
		}
	}
	return b.String()
}

func TestWriteDomainTextEmpty(t *testing.T) {
	var b bytes.Buffer
	d := Domain{Namespace: "ns", Name: "cd", DriverNamespace: "cdplane", Membership: MembershipStatusNodes}
	if err := WriteDomainText(&b, d, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`control plane (legacy)`, "Status: -", "No node has joined the domain.", "Held back: none", "Conditions: none reported yet"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

// TestJSONFields pins the JSON field names scripts rely on (docs/operations.md).
func TestJSONFields(t *testing.T) {
	cases := map[string]struct {
		v    any
		want string
	}{
		"planes": {v: Planes{ObservedAt: testNow, Planes: samplePlanes().Planes[1:2]}, want: `{
  "observedAt": "2026-03-01T12:00:00Z",
  "planes": [
    {
      "id": "a",
      "legacy": false,
      "installed": true,
      "driverNamespace": "a-cdplane",
      "version": "v0.4.0",
      "controller": {
        "desired": 2,
        "ready": 2
      },
      "nodes": 18,
      "nodesPluginReady": 17,
      "nodesCountedBy": "label",
      "namespaces": 3,
      "namespacesCountedBy": "label",
      "domains": {
        "ready": 4,
        "notReady": 1
      },
      "leader": {
        "lease": "a-cdplane-controller",
        "election": true,
        "holder": "a-cdplane-controller-5c8b7-9qzzt",
        "acquireTime": "2026-03-01T08:58:00Z",
        "ageSeconds": 720,
        "expired": true
      }
    }
  ]
}
`},
		"domain": {v: func() Domain {
			d := sampleDomain()
			d.Cliques = d.Cliques[1:]
			d.Conditions = d.Conditions[:1]
			return d
		}(), want: `{
  "observedAt": "2026-03-01T12:00:00Z",
  "namespace": "team-a",
  "name": "train",
  "uid": "5f1c",
  "controlPlaneID": "a",
  "driverNamespace": "a-cdplane",
  "status": "NotReady",
  "numNodes": 4,
  "readyNodes": 3,
  "totalNodes": 4,
  "membership": "cliques",
  "cliques": [
    {
      "id": "",
      "ready": 1,
      "total": 1,
      "nodes": [
        {
          "name": "node-9",
          "ipAddress": "",
          "index": -1,
          "status": "Ready"
        }
      ]
    }
  ],
  "heldBack": [
    {
      "node": "node-1",
      "reason": "HostIMEXInUse",
      "message": "IMEX cannot run: a host nvidia-imex holds it"
    }
  ],
  "conditions": [
    {
      "type": "Ready",
      "status": "False",
      "reason": "DaemonsNotReady",
      "message": "1 of 4 daemons are not ready, on nodes: node-1",
      "lastTransitionTime": "2026-03-01T12:00:00Z"
    }
  ]
}
`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteJSON(&b, tc.v); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// An empty model still has its lists, never null, so that scripts can iterate.
func TestJSONEmptyLists(t *testing.T) {
	d := BuildDomain(DomainInput{Domain: testDomain(), DriverNamespace: testDriverNS, Now: testNow})
	var b bytes.Buffer
	if err := WriteJSON(&b, d); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"cliques", "heldBack", "conditions"} {
		if _, ok := m[k].([]any); !ok {
			t.Errorf("%s = %v, want a list", k, m[k])
		}
	}
	p := BuildPlanes(PlanesInput{Now: testNow})
	b.Reset()
	if err := WriteJSON(&b, p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"planes": []`) {
		t.Errorf("planes not an empty list: %s", b.String())
	}
}

// TestTextEscapesWhatOthersWrote: a daemon can post an event, and whoever can write a domain's
// status a condition, with terminal escape sequences in it (clear the screen, set the window
// title, hide text) or Unicode that reorders text. The text output prints them as escapes, with
// colour on or off; the only escape sequences it writes are its own colours.
func TestTextEscapesWhatOthersWrote(t *testing.T) {
	const hostile = "pull failed\x1b[2J\x1b]0;pwned\x07\tnext\nline \u202egnp.exe\x9b"
	d := sampleDomain()
	d.HeldBack = []HeldBack{{Node: "node-1", Reason: ReasonDaemonNotReady, Message: hostile}}
	d.Conditions = []Condition{{Type: "Ready", Status: "False", Reason: "X\x1b[8m", Message: hostile}}
	for _, color := range []bool{false, true} {
		var b bytes.Buffer
		if err := WriteDomainText(&b, d, Options{Color: color}); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, code := range []string{green, red, yellow, reset} {
			out = strings.ReplaceAll(out, code, "")
		}
		for _, r := range out {
			if r != '\n' && unprintable(r) {
				t.Fatalf("colour %t: output holds control character %U:\n%q", color, r, out)
			}
		}
		for _, want := range []string{`pull failed\x1b[2J\x1b]0;pwned\x07 next line \u202egnp.exe\x9b`, `X\x1b[8m`} {
			if !strings.Contains(out, want) {
				t.Errorf("colour %t: output lacks %q:\n%s", color, want, out)
			}
		}
	}
	var b bytes.Buffer
	if err := WritePlanesText(&b, Planes{Planes: []Plane{{ID: "a", Installed: true, Version: "v1\x1b[31m",
		Leader: &Leader{Election: true, Holder: "pod\x1b]0;x\x07"}}}}, Options{}); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsRune(b.String(), 0x1b) || !strings.Contains(b.String(), `pod\x1b]0;x\x07`) {
		t.Errorf("planes output:\n%q", b.String())
	}
}
