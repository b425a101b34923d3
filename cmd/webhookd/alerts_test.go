package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// alertRules is the part of a Prometheus rules file this test reads.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// TestAlertRules parses deploy/prometheus/alerts.yaml: every rule has a
// unique name, a PromQL expression that parses, a valid `for`, a severity
// and a summary, and every metric it names is one a running webhookd
// exports, with the labels it matches on. The alerts the README promises
// are there.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}

	// What a running `webhookd all` exports, after one API request (a
	// counter by route appears with its first request).
	m, key := startMain(t, Roles{API: true, Worker: true, Ops: true}, nil)
	callAPI(t, m.APIAddr, key, "GET", "/v1/endpoints", "", false)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labelsOf := map[string][]string{ // metric name → its label names; Prometheus adds job and instance
		"up": {"job", "instance"},
	}
	for _, f := range families {
		names := []string{"job", "instance"}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if !slices.Contains(names, l.GetName()) {
					names = append(names, l.GetName())
				}
			}
		}
		labelsOf[f.GetName()] = names
		if f.GetType().String() == "HISTOGRAM" {
			labelsOf[f.GetName()+"_bucket"] = append(names, "le")
			labelsOf[f.GetName()+"_sum"], labelsOf[f.GetName()+"_count"] = names, names
		}
	}

	p := parser.NewParser(parser.Options{})
	seen := map[string]bool{}
	for _, g := range rules.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: a name and rules are required", g.Name)
		}
		for _, r := range g.Rules {
			switch {
			case r.Alert == "" || seen[r.Alert]:
				t.Errorf("alert %q: missing or repeated name", r.Alert)
			case r.Labels["severity"] == "" || r.Annotations["summary"] == "":
				t.Errorf("%s: needs labels.severity and annotations.summary", r.Alert)
			}
			seen[r.Alert] = true
			if _, err := model.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", r.Alert, err)
				continue
			}
			if expr.Type() != parser.ValueTypeVector {
				t.Errorf("%s: the expression is a %s, want an instant vector", r.Alert, expr.Type())
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				vs, ok := n.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				labels, exported := labelsOf[vs.Name]
				if !exported {
					t.Errorf("%s: webhookd exports no metric %q", r.Alert, vs.Name)
					return nil
				}
				for _, lm := range vs.LabelMatchers {
					if lm.Name != model.MetricNameLabel && !slices.Contains(labels, lm.Name) {
						t.Errorf("%s: %s has no label %q (it has %v)", r.Alert, vs.Name, lm.Name, labels)
					}
				}
				return nil
			})
		}
	}
	for _, want := range []string{"WebhookdDeliveriesOverdue", "WebhookdDeadLettersRising", "WebhookdRedisDown",
		"WebhookdPostgresDown", "WebhookdProcessDown"} {
		if !seen[want] {
			t.Errorf("alerts.yaml lacks %s", want)
		}
	}
}
