// Package grafana builds levee's Grafana dashboards (JSON model, schemaVersion 41) from Go values.
// `go run ./cmd/gen` writes them to dashboards/grafana/; a test fails when the files there differ
// from what this package produces, so the JSON is never edited by hand.
package grafana

import (
	"bytes"
	"encoding/json"
)

// SchemaVersion is the dashboard JSON schema of Grafana 12: a dashboard at this version loads
// without migration.
const SchemaVersion = 41

// Selector matches the series of the members chosen by the namespace, cluster and member
// variables. The ServiceMonitor the operator creates scrapes each member through the cluster's
// headless Service `<cluster>-headless`, so Prometheus labels every levee series with
// `namespace`, `service` and `pod`; the cluster variable shows `service` without the suffix.
const Selector = `namespace=~"$namespace", service=~"${cluster}-headless", pod=~"$member"`

// OperatorSelector matches the operator's series of the chosen clusters (`OPSEL` in a query):
// the operator names a KVCluster by kvcluster_namespace and kvcluster, since a scrape of the
// operator carries its own namespace and pod.
const OperatorSelector = `kvcluster_namespace=~"$namespace", kvcluster=~"$cluster"`

// DS is the templated Prometheus data source every panel and variable uses.
var DS = &Datasource{Type: "prometheus", UID: "${datasource}"}

type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type Dashboard struct {
	Annotations          Annotations `json:"annotations"`
	Description          string      `json:"description"`
	Editable             bool        `json:"editable"`
	FiscalYearStartMonth int         `json:"fiscalYearStartMonth"`
	GraphTooltip         int         `json:"graphTooltip"`
	ID                   *int        `json:"id"`
	Links                []Link      `json:"links"`
	Panels               []*Panel    `json:"panels"`
	Refresh              string      `json:"refresh"`
	SchemaVersion        int         `json:"schemaVersion"`
	Tags                 []string    `json:"tags"`
	Templating           Templating  `json:"templating"`
	Time                 TimeRange   `json:"time"`
	Timepicker           struct{}    `json:"timepicker"`
	Timezone             string      `json:"timezone"`
	Title                string      `json:"title"`
	UID                  string      `json:"uid"`
	Version              int         `json:"version"`
	WeekStart            string      `json:"weekStart"`
}

type Annotations struct {
	List []Annotation `json:"list"`
}

type Annotation struct {
	BuiltIn    int         `json:"builtIn"`
	Datasource *Datasource `json:"datasource"`
	Enable     bool        `json:"enable"`
	Hide       bool        `json:"hide"`
	IconColor  string      `json:"iconColor"`
	Name       string      `json:"name"`
	Type       string      `json:"type"`
}

type Link struct {
	AsDropdown  bool     `json:"asDropdown"`
	IncludeVars bool     `json:"includeVars"`
	KeepTime    bool     `json:"keepTime"`
	Tags        []string `json:"tags"`
	Title       string   `json:"title"`
	Type        string   `json:"type"`
}

type Templating struct {
	List []Variable `json:"list"`
}

type Variable struct {
	AllValue    string         `json:"allValue,omitempty"`
	Current     map[string]any `json:"current"`
	Datasource  *Datasource    `json:"datasource,omitempty"`
	Definition  string         `json:"definition,omitempty"`
	Description string         `json:"description,omitempty"`
	Hide        int            `json:"hide"`
	IncludeAll  bool           `json:"includeAll"`
	Label       string         `json:"label"`
	Multi       bool           `json:"multi"`
	Name        string         `json:"name"`
	Options     []any          `json:"options"`
	Query       any            `json:"query"`
	Refresh     int            `json:"refresh"`
	Regex       string         `json:"regex"`
	Sort        int            `json:"sort,omitempty"`
	Type        string         `json:"type"`
}

type TimeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

type Panel struct {
	Collapsed   *bool        `json:"collapsed,omitempty"`
	Datasource  *Datasource  `json:"datasource,omitempty"`
	Description string       `json:"description,omitempty"`
	FieldConfig *FieldConfig `json:"fieldConfig,omitempty"`
	GridPos     GridPos      `json:"gridPos"`
	ID          int          `json:"id"`
	Options     any          `json:"options,omitempty"`
	Panels      []*Panel     `json:"panels,omitempty"`
	Targets     []Target     `json:"targets,omitempty"`
	Title       string       `json:"title"`
	Type        string       `json:"type"`
}

type FieldConfig struct {
	Defaults  Defaults   `json:"defaults"`
	Overrides []Override `json:"overrides"`
}

type Defaults struct {
	Color      map[string]any `json:"color"`
	Custom     map[string]any `json:"custom,omitempty"`
	Decimals   *int           `json:"decimals,omitempty"`
	Mappings   []any          `json:"mappings"`
	Max        *float64       `json:"max,omitempty"`
	Min        *float64       `json:"min,omitempty"`
	Thresholds Thresholds     `json:"thresholds"`
	Unit       string         `json:"unit"`
}

type Thresholds struct {
	Mode  string `json:"mode"`
	Steps []Step `json:"steps"`
}

// Step is one threshold; the first has a nil Value (the base colour).
type Step struct {
	Color string   `json:"color"`
	Value *float64 `json:"value"`
}

type Override struct {
	Matcher    Matcher    `json:"matcher"`
	Properties []Property `json:"properties"`
}

type Matcher struct {
	ID      string `json:"id"`
	Options string `json:"options"`
}

type Property struct {
	ID    string `json:"id"`
	Value any    `json:"value"`
}

type Target struct {
	Datasource   *Datasource `json:"datasource"`
	EditorMode   string      `json:"editorMode"`
	Expr         string      `json:"expr"`
	Instant      bool        `json:"instant"`
	LegendFormat string      `json:"legendFormat"`
	Range        bool        `json:"range"`
	RefID        string      `json:"refId"`
}

// Marshal renders a dashboard as indented JSON with a trailing newline, the form checked in.
func Marshal(d *Dashboard) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
