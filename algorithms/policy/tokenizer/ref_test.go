package tokenizer

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

type refCase struct {
	Text               string   `json:"text"`
	IDs                []int32  `json:"ids"`
	IDsSpecial         []int32  `json:"ids_special"`
	Decoded            hexBytes `json:"decoded_hex"`
	DecodedSkipSpecial hexBytes `json:"decoded_skip_special_hex"`
}

// TestReference compares with testdata/gen.py, a plain Python byte-level
// BPE on the regex module, for GPT-2-, Qwen2- and Llama-3-style tokenizers.
func TestReference(t *testing.T) {
	for _, style := range []string{"gpt2", "qwen2", "llama3"} {
		t.Run(style, func(t *testing.T) {
			dir := filepath.Join("testdata", style)
			tok, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(filepath.Join(dir, "expected.json"))
			if err != nil {
				t.Fatal(err)
			}
			var cases []refCase
			if err := json.Unmarshal(data, &cases); err != nil {
				t.Fatal(err)
			}
			if len(cases) < 50 {
				t.Fatalf("%d cases", len(cases))
			}
			for _, c := range cases {
				if got := tok.Encode(c.Text, false); !slices.Equal(got, c.IDs) {
					t.Errorf("Encode(%q) =\n%v, want\n%v", c.Text, got, c.IDs)
				}
				if got := tok.Encode(c.Text, true); !slices.Equal(got, c.IDsSpecial) {
					t.Errorf("Encode(%q, special) =\n%v, want\n%v", c.Text, got, c.IDsSpecial)
				}
				if got := tok.Decode(c.IDs, false); got != string(c.Decoded) {
					t.Errorf("Decode(%q) = %q, want %q", c.Text, got, c.Decoded)
				}
				if got := tok.Decode(c.IDs, true); got != string(c.DecodedSkipSpecial) {
					t.Errorf("Decode(%q, skip) = %q, want %q", c.Text, got, c.DecodedSkipSpecial)
				}
			}
		})
	}
}

// hexBytes is a JSON string of hex digits (decoded text may be invalid UTF-8).
type hexBytes []byte

func (h *hexBytes) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	d, err := hex.DecodeString(s)
	*h = d
	return err
}
