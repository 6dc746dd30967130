package tokenizer

// GPT-2's byte-to-unicode map: every byte gets a printable character, the
// printable ASCII and Latin-1 bytes themselves and the rest U+0100 onwards,
// so that byte-level tokens are readable strings ("Ġ" is the space).
var (
	byteChar [256]string
	charByte = map[rune]byte{}
)

func init() {
	n := 0
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r = rune(256 + n)
			n++
		}
		byteChar[b] = string(r)
		charByte[r] = byte(b)
	}
}

// byteLevelBytes returns the raw bytes a byte-level token stands for, or
// false if one of its characters is outside the map.
func byteLevelBytes(tok string) ([]byte, bool) {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := charByte[r]
		if !ok {
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}
