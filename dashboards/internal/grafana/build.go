package grafana

import "strings"

// Q is one query of a panel: a PromQL expression and its legend. `SEL` in Expr stands for
// Selector (the namespace, cluster and member matchers of node series), `OPSEL` for
// OperatorSelector (the namespace and cluster matchers of the operator's series).
type Q struct {
	Expr, Legend string
}

func (q Q) target(refID string) Target {
	expr := strings.ReplaceAll(strings.ReplaceAll(q.Expr, "OPSEL", OperatorSelector), "SEL", Selector)
	return Target{Datasource: DS, EditorMode: "code", Expr: expr,
		LegendFormat: q.Legend, Range: true, RefID: refID}
}

// layout places panels left to right in rows of 24 grid columns.
type layout struct {
	panels []*Panel
	nextID int
	x, y   int
	rowH   int
}

func (l *layout) id() int { l.nextID++; return l.nextID }

func (l *layout) row(title string) {
	l.newline()
	collapsed := false
	l.panels = append(l.panels, &Panel{Collapsed: &collapsed, GridPos: GridPos{H: 1, W: 24, X: 0, Y: l.y},
		ID: l.id(), Panels: []*Panel{}, Title: title, Type: "row"})
	l.y++
}

func (l *layout) newline() {
	if l.x > 0 {
		l.x, l.y, l.rowH = 0, l.y+l.rowH, 0
	}
}

func (l *layout) add(w, h int, p *Panel) *Panel {
	if l.x+w > 24 {
		l.newline()
	}
	p.ID = l.id()
	p.GridPos = GridPos{H: h, W: w, X: l.x, Y: l.y}
	l.x += w
	if h > l.rowH {
		l.rowH = h
	}
	l.panels = append(l.panels, p)
	return p
}

func f(v float64) *float64 { return &v }

func baseDefaults(unit string) Defaults {
	return Defaults{
		Color:      map[string]any{"mode": "palette-classic"},
		Mappings:   []any{},
		Thresholds: Thresholds{Mode: "absolute", Steps: []Step{{Color: "green"}}},
		Unit:       unit,
	}
}

// timeseries is a line chart; queries get refIds A, B, ...
func timeseries(title, desc, unit string, qs ...Q) *Panel {
	d := baseDefaults(unit)
	d.Custom = map[string]any{
		"axisPlacement": "auto", "drawStyle": "line", "fillOpacity": 10, "lineWidth": 1,
		"showPoints": "never", "spanNulls": false,
		"stacking": map[string]any{"group": "A", "mode": "none"},
	}
	p := &Panel{Datasource: DS, Description: desc, FieldConfig: &FieldConfig{Defaults: d, Overrides: []Override{}},
		Options: map[string]any{
			"legend":  map[string]any{"calcs": []string{"mean", "max", "lastNotNull"}, "displayMode": "table", "placement": "bottom", "showLegend": true},
			"tooltip": map[string]any{"mode": "multi", "sort": "desc"},
		},
		Title: title, Type: "timeseries"}
	for i, q := range qs {
		p.Targets = append(p.Targets, q.target(string(rune('A'+i))))
	}
	return p
}

// stat shows one number: the last value of q over the dashboard's time range.
func stat(title, desc, unit string, q Q, steps ...Step) *Panel {
	d := baseDefaults(unit)
	d.Color = map[string]any{"mode": "thresholds"}
	if len(steps) > 0 {
		d.Thresholds.Steps = append([]Step{{Color: "green"}}, steps...)
	}
	return &Panel{Datasource: DS, Description: desc, FieldConfig: &FieldConfig{Defaults: d, Overrides: []Override{}},
		Options: map[string]any{
			"colorMode": "value", "graphMode": "area", "justifyMode": "auto", "orientation": "auto",
			"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false},
			"textMode":      "auto",
		},
		Targets: []Target{q.target("A")}, Title: title, Type: "stat"}
}

// withRange sets the y axis bounds of a panel.
func withRange(p *Panel, min, max *float64) *Panel {
	p.FieldConfig.Defaults.Min, p.FieldConfig.Defaults.Max = min, max
	return p
}

// rightAxis moves the series of query refID to a right-hand axis with its own unit.
func rightAxis(p *Panel, refID, unit string, min, max *float64) *Panel {
	props := []Property{{ID: "unit", Value: unit}, {ID: "custom.axisPlacement", Value: "right"}}
	if min != nil {
		props = append(props, Property{ID: "min", Value: *min})
	}
	if max != nil {
		props = append(props, Property{ID: "max", Value: *max})
	}
	p.FieldConfig.Overrides = append(p.FieldConfig.Overrides, Override{Matcher: Matcher{ID: "byFrameRefID", Options: refID}, Properties: props})
	return p
}

// bars draws a time series as bars (for counts per interval).
func bars(p *Panel) *Panel {
	p.FieldConfig.Defaults.Custom["drawStyle"] = "bars"
	p.FieldConfig.Defaults.Custom["fillOpacity"] = 80
	return p
}

func variables() []Variable {
	all := map[string]any{"selected": true, "text": []string{"All"}, "value": []string{"$__all"}}
	q := func(name, label, query, regex, desc string) Variable {
		return Variable{AllValue: ".+", Current: all, Datasource: DS, Definition: query, Description: desc,
			IncludeAll: true, Label: label, Multi: true, Name: name, Options: []any{},
			// The classic string form: Grafana turns label_values(selector, label) into its
			// label-values editor state itself.
			Query: query, Refresh: 2, Regex: regex, Sort: 1, Type: "query"}
	}
	return []Variable{
		{Current: map[string]any{}, Description: "The Prometheus that scrapes the levee members.",
			Label: "Data source", Name: "datasource", Options: []any{}, Query: "prometheus", Refresh: 1, Type: "datasource"},
		q("namespace", "Namespace", `label_values(levee_vnodes, namespace)`, "",
			"Kubernetes namespaces holding levee clusters."),
		q("cluster", "Cluster", `label_values(levee_vnodes{namespace=~"$namespace"}, service)`, `/^(.+)-headless$/`,
			"KVCluster name (the scrape's `service` label is `<cluster>-headless`)."),
		q("member", "Member", `label_values(levee_vnodes{namespace=~"$namespace", service=~"${cluster}-headless"}, pod)`, "",
			"Member pods of the chosen clusters."),
	}
}

func dashboard(uid, title, desc string, l *layout) *Dashboard {
	return &Dashboard{
		Annotations: Annotations{List: []Annotation{{BuiltIn: 1, Datasource: &Datasource{Type: "grafana", UID: "-- Grafana --"},
			Enable: true, Hide: true, IconColor: "rgba(0, 211, 255, 1)", Name: "Annotations & Alerts", Type: "dashboard"}}},
		Description: desc,
		Links: []Link{{AsDropdown: true, IncludeVars: true, KeepTime: true, Tags: []string{"levee"},
			Title: "levee dashboards", Type: "dashboards"}},
		Panels:        l.panels,
		Refresh:       "30s",
		SchemaVersion: SchemaVersion,
		Tags:          []string{"levee"},
		Templating:    Templating{List: variables()},
		Time:          TimeRange{From: "now-6h", To: "now"},
		Title:         title,
		UID:           uid,
		Version:       1,
	}
}
