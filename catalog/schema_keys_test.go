package catalog

import (
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// The schema and the parser know the same keys: every object of
// catalog.schema.json lists exactly the yaml keys of the Go type the parser
// decodes it into.
func TestSchemaKeysAreTheParsersKeys(t *testing.T) {
	raw, err := os.ReadFile("catalog.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	defs := schema["$defs"].(map[string]any)
	var walk func(path string, s map[string]any, typ reflect.Type)
	walk = func(path string, s map[string]any, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if ref, ok := s["$ref"].(string); ok {
			s = defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
		}
		if items, ok := s["items"].(map[string]any); ok && s["properties"] == nil {
			walk(path, items, typ)
			return
		}
		if typ.Kind() != reflect.Struct {
			return
		}
		props, _ := s["properties"].(map[string]any)
		var fromSchema, fromGo []string
		for k := range props {
			fromSchema = append(fromSchema, k)
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			fromGo = append(fromGo, name)
			if p, ok := props[name].(map[string]any); ok {
				walk(path+"."+name, p, f.Type)
			}
		}
		sort.Strings(fromSchema)
		sort.Strings(fromGo)
		if !reflect.DeepEqual(fromSchema, fromGo) {
			t.Errorf("%s: the schema has keys %v, the parser %v", path, fromSchema, fromGo)
		}
		if s["additionalProperties"] != false {
			t.Errorf("%s: the schema allows unknown keys; the parser refuses them", path)
		}
	}
	walk("", schema, reflect.TypeFor[file]())
}
