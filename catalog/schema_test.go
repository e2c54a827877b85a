package catalog_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentsaga/agentsaga/catalog"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open("catalog.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("catalog.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("catalog.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// yamlAsJSON reads a YAML file as the JSON value an editor validates.
func yamlAsJSON(t *testing.T, path string) any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

var sampleEnv = map[string]string{"AGENTSAGA_FS_ROOT": "/srv/files", "AGENTSAGA_MEMORY_FILE": "/srv/memory.jsonl", "AGENTSAGA_SANDBOX_URL": "http://127.0.0.1:1", "AGENTSAGA_MAILPIT_URL": "http://127.0.0.1:1", "PAY_URL": "http://127.0.0.1:1", "PAY_TOKEN": "t"}

func loadSample(path string) error {
	_, err := catalog.LoadWith(catalog.Options{Getenv: func(k string) (string, bool) { v, ok := sampleEnv[k]; return v, ok }}, path)
	return err
}

// The shipped examples are valid for the schema and for the parser.
func TestSchemaAcceptsShippedExamples(t *testing.T) {
	s := compileSchema(t)
	files, _ := filepath.Glob("examples/*.yaml")
	more, _ := filepath.Glob("testdata/*.yaml")
	files = append(files, more...)
	if len(files) < 2 {
		t.Fatalf("found only %v", files)
	}
	for _, f := range files {
		if err := s.Validate(yamlAsJSON(t, f)); err != nil {
			t.Errorf("%s: schema refuses it: %v", f, err)
		}
		if err := loadSample(f); err != nil {
			t.Errorf("%s: parser refuses it: %v", f, err)
		}
	}
}

// Files whose mistakes are structural are refused by both the schema and
// the parser: the two agree on the format.
func TestSchemaAndParserRefuseTheSameFiles(t *testing.T) {
	s := compileSchema(t)
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	if len(files) == 0 {
		t.Fatal("no invalid samples")
	}
	for _, f := range files {
		if err := s.Validate(yamlAsJSON(t, f)); err == nil {
			t.Errorf("%s: the schema accepts it", f)
		}
		if err := loadSample(f); err == nil {
			t.Errorf("%s: the parser accepts it", f)
		}
	}
}
