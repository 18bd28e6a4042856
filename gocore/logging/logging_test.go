package logging

import "testing"

func TestParseLevel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"debug", "debug", true}, {"INFO", "info", true}, {"warning", "warn", true},
		{"warn", "warn", true}, {"error", "error", true}, {"critical", "dpanic", true},
		{"loud", "", false},
	} {
		lv, err := ParseLevel(tc.in)
		if (err == nil) != tc.ok {
			t.Fatalf("ParseLevel(%q) err=%v, want ok=%v", tc.in, err, tc.ok)
		}
		if tc.ok && lv.String() != tc.want {
			t.Errorf("ParseLevel(%q) = %s, want %s", tc.in, lv, tc.want)
		}
	}
}

func TestSetLevelAndEnabled(t *testing.T) {
	if err := SetLevel("error"); err != nil {
		t.Fatal(err)
	}
	if Enabled("info") || !Enabled("error") {
		t.Fatalf("level error: info enabled=%v error enabled=%v", Enabled("info"), Enabled("error"))
	}
	if err := SetLevel("debug"); err != nil {
		t.Fatal(err)
	}
	if !Enabled("debug") || Level() != "debug" {
		t.Fatalf("level after SetLevel(debug) = %s", Level())
	}
	if err := SetLevel("nope"); err == nil {
		t.Fatal("SetLevel(nope) should fail")
	}
	if err := SetFormat("xml"); err == nil {
		t.Fatal("SetFormat(xml) should fail")
	}
	if err := SetFormat("json"); err != nil || Format() != "json" {
		t.Fatalf("SetFormat(json): %v, format %s", err, Format())
	}
	if err := Emit("info", "mkernel.py.test", "hello", "k", "v"); err != nil {
		t.Fatal(err)
	}
	_ = SetFormat("console")
}
