package fleetctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The config is JSON on the bus and YAML for people. Both directions go
// through JSON so that the YAML keys are exactly the JSON keys and a file is
// decoded by rollout's own (strict, defaulting) JSON decoder.

// jsonToYAML re-encodes one JSON value as YAML, keeping the key order (so a
// group reads name first, as it was marshalled) and writing lists of scalars
// on one line.
func jsonToYAML(data []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	node, err := yamlNodeFromJSON(dec)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(node); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func yamlNodeFromJSON(dec *json.Decoder) (*yaml.Node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	scalar := func(tag, value string) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("json: object key %v is not a string", kt)
				}
				v, err := yamlNodeFromJSON(dec)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, scalar("!!str", k), v)
			}
			_, err := dec.Token() // '}'
			return n, err
		case '[':
			n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
			for dec.More() {
				v, err := yamlNodeFromJSON(dec)
				if err != nil {
					return nil, err
				}
				if v.Kind != yaml.ScalarNode {
					n.Style = 0
				}
				n.Content = append(n.Content, v)
			}
			_, err := dec.Token() // ']'
			return n, err
		}
		return nil, fmt.Errorf("json: unexpected %v", t)
	case string:
		return scalar("!!str", t), nil
	case json.Number:
		if strings.ContainsAny(t.String(), ".eE") {
			return scalar("!!float", t.String()), nil
		}
		return scalar("!!int", t.String()), nil
	case bool:
		if t {
			return scalar("!!bool", "true"), nil
		}
		return scalar("!!bool", "false"), nil
	case nil:
		// Kept explicit: depends_on null ("the group before") is not [] ("none").
		return scalar("!!null", "null"), nil
	}
	return nil, fmt.Errorf("json: unexpected token %v", tok)
}

// yamlToJSON reads exactly one YAML (or JSON) document and returns it as
// JSON. Duplicate keys are an error (yaml.v3 rejects them).
func yamlToJSON(data []byte) ([]byte, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty: want a config document")
		}
		return nil, err
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document: want exactly one config")
	}
	j, err := jsonable(v, "")
	if err != nil {
		return nil, err
	}
	return json.Marshal(j)
}

// jsonable checks that a decoded YAML value has a JSON equivalent.
func jsonable(v any, path string) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			c, err := jsonable(e, path+"."+k)
			if err != nil {
				return nil, err
			}
			t[k] = c
		}
		return t, nil
	case map[any]any:
		return nil, fmt.Errorf("%s: keys must be strings", strings.TrimPrefix(path, "."))
	case []any:
		for i, e := range t {
			c, err := jsonable(e, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			t[i] = c
		}
		return t, nil
	case float64:
		if math.IsNaN(t) || math.IsInf(t, 0) {
			return nil, fmt.Errorf("%s: %v is not a number JSON can hold", strings.TrimPrefix(path, "."), t)
		}
	}
	return v, nil
}
