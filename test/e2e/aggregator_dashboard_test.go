//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cgpilot/cgpilot/aggregator"
	"github.com/cgpilot/cgpilot/test/aggtest"
	"github.com/cgpilot/cgpilot/test/tier"
)

// chromium is Debian's Chromium (make deps installs it).
const chromium = "/usr/bin/chromium"

// simClock is a clock the test moves.
type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *simClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *simClock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// TestDashboardInChromium feeds a replica four simulated hours of a
// 20-node fleet whose right-sizing rolls out during the run (with failed
// writes, OOM kills, conflicting policies, a silent node and a node with
// sampling gaps), then loads the dashboard in headless Chromium, driven by
// chromedp: without a token the page asks for one and shows no data; with
// a viewer's token (in the URL's fragment, as the demo opens it) every
// chart is drawn from the JSON API and agrees with it, and the screenshot
// shows the charts' colours.
func TestDashboardInChromium(t *testing.T) {
	tier.E2E(t)
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("e2e tier: the dashboard test needs Debian's chromium at %s (make deps installs it): %v", chromium, err)
	}
	dir := t.TempDir()
	certs, err := aggtest.Certs(dir)
	if err != nil {
		t.Fatal(err)
	}
	const nodes, hours = 20, 4
	start := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	fleet := aggtest.NewFleet(aggtest.FleetConfig{Nodes: nodes, PodsPerNode: 40, Seed: 42, NodeCPU: 17, NodeMemory: 96 << 30,
		Start: start, RolloutOver: 3 * time.Hour, EventRate: 0.004, ConflictRate: 0.05})
	tokens := tokenFiles(t, dir, fleet, nodes)
	clock := &simClock{now: start}
	agg := aggtest.Start(t, aggregator.Config{Standalone: true, StaticTokens: tokens, Identity: "dashboard", CertFile: certs.CertFile, KeyFile: certs.KeyFile,
		FoldInterval: 20 * time.Millisecond, Clock: clock.Now})
	clients := clientsFor(t, dir, fleet, nodes, agg.URL(), certs)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	t0 := time.Now()
	for w := 1; w <= hours*60; w++ {
		end := start.Add(time.Duration(w) * time.Minute)
		clock.Set(end.Add(10 * time.Second))
		for i, c := range clients {
			switch {
			case i == nodes-1 && w > hours*60-15: // silent for the last 15 minutes
				continue
			case i == nodes-2 && w%47 == 0: // a window lost now and then
				continue
			}
			c.Enqueue(fleet.Report(i, end))
			if err := c.Flush(ctx); err != nil {
				t.Fatalf("window %d node %d: %v", w, i, err)
			}
		}
		// Let the replica fold and tick at this simulated minute.
		time.Sleep(25 * time.Millisecond)
	}
	clock.Set(start.Add(hours*time.Hour + 3*time.Minute))
	time.Sleep(200 * time.Millisecond)
	t.Logf("%d simulated hours of %d nodes sent in %v", hours, nodes, time.Since(t0).Round(time.Second))

	// What the page must show, from the API.
	var sum struct {
		Coverage struct {
			Adjustable, Workloads int
		} `json:"coverage"`
		Anomalies map[string]int `json:"anomalies"`
	}
	getJSON(t, agg.HTTPURL()+"/api/v1/summary", &sum)
	var sat struct {
		Points []struct{ CPU float64 } `json:"points"`
	}
	getJSON(t, agg.HTTPURL()+"/api/v1/saturation", &sat)
	if len(sat.Points) < 40 || sum.Coverage.Adjustable == 0 || sum.Anomalies["nodesNotReporting"] != 1 || sum.Anomalies["samplingGaps"] == 0 ||
		sum.Anomalies["failedWrites"] == 0 || sum.Anomalies["multiplePolicies"] == 0 {
		t.Fatalf("the data is too thin to test the page: %d saturation points, summary %+v", len(sat.Points), sum)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(filepath.Join(dir, "chromium")), chromedp.WindowSize(1400, 1000))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1400, 1000), chromedp.Navigate(agg.HTTPURL()+"/"),
		chromedp.WaitVisible(`body[data-login="1"]`)); err != nil {
		t.Fatalf("chromium without a token: %v", err)
	}
	if v, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#tiles').innerText + (document.body.dataset.error || "")`)); err != nil ||
		strings.Contains(v, "reporting") || !strings.Contains(v, "401") {
		t.Errorf("without a token the page shows %q (%v): want no data and the API's 401", v, err)
	}
	wctx, wcancel := context.WithTimeout(bctx, time.Minute)
	defer wcancel()
	if err := chromedp.Do(wctx, chromedp.Navigate("about:blank"), chromedp.Navigate(agg.HTTPURL()+"/#token="+viewerToken),
		chromedp.WaitVisible(`body[data-ready="1"]`)); err != nil {
		state, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`location.href + " error=" + (document.body.dataset.error || "") + " login=" + (document.body.dataset.login || "")`))
		t.Fatalf("chromium with the viewer's token: %v (%s)", err, state)
	}
	if u, err := chromedp.Run(bctx, chromedp.Evaluate[string](`location.href`)); err != nil || strings.Contains(u, viewerToken) {
		t.Errorf("the token stays in the address bar: %q %v", u, err)
	}
	str := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	num := func(expr string) int {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[int](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	if e := str(`document.body.dataset.error || ""`); e != "" {
		t.Errorf("the page reports an error: %s", e)
	}
	coverageSegs := num(`document.querySelectorAll('#coverage rect[data-series]').length`)
	releasedBars := num(`document.querySelectorAll('#released rect[data-series="cpu"]').length`)
	cpuPath := str(`document.querySelector('#saturation path[data-series="cpu"]').getAttribute('d')`)
	memPath := str(`document.querySelector('#saturation path[data-series="memory"]').getAttribute('d')`)
	tiles := str(`document.querySelector('#tiles').innerText`)
	hotT := str(`document.querySelector('#hot').innerText`)
	anomalyRows := num(`document.querySelectorAll('#anomaly-list tr').length`)
	historyRows := num(`document.querySelectorAll('#history tr').length`)
	adjustableTitle := str(`document.querySelector('#coverage rect[data-series="adjustable"] title').textContent`)
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if coverageSegs < 4 {
		t.Errorf("coverage bar has %d segments, want adjustable, reasons, several policies, no policy", coverageSegs)
	}
	if want := fmt.Sprintf("adjustable: %d", sum.Coverage.Adjustable); adjustableTitle != want {
		t.Errorf("coverage segment %q, the API says %q", adjustableTitle, want)
	}
	if releasedBars < 5 {
		t.Errorf("released capacity: %d namespace bars", releasedBars)
	}
	if n := strings.Count(cpuPath, "L"); n < len(sat.Points)-1 || strings.Count(memPath, "L") != n {
		t.Errorf("saturation lines have %d and %d segments for %d points", n, strings.Count(memPath, "L"), len(sat.Points))
	}
	if !strings.Contains(tiles, fmt.Sprintf("%d", nodes-1)) || !strings.Contains(tiles, "1 silent") || !strings.Contains(tiles, "CPU released") {
		t.Errorf("tiles: %q", tiles)
	}
	if anomalyRows < 4 || historyRows < 5 {
		t.Errorf("%d anomaly rows, %d history rows", anomalyRows, historyRows)
	}

	// The screenshot: a real render with every chart colour on it.
	out := os.Getenv("CGPILOT_SCREENSHOT_DIR")
	if out == "" {
		out = dir
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, "aggregator-dashboard.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	b := img.Bounds()
	if b.Dx() != 1400 || b.Dy() < 1000 {
		t.Errorf("screenshot %v, want 1400 wide and the full page", b)
	}
	colours := map[string][3]uint8{"CPU blue": {0x2f, 0x6f, 0xdb}, "memory orange": {0xe0, 0x82, 0x3d}, "adjustable green": {0x2f, 0x9e, 0x6f}, "anomaly red": {0xd9, 0x53, 0x4f}}
	for name, c := range colours {
		if n := countColour(img, c); n < 300 {
			t.Errorf("%s: %d pixels in the screenshot, want a drawn chart", name, n)
		} else {
			t.Logf("%s: %d pixels", name, n)
		}
	}
	t.Logf("screenshot: %s (%dx%d); hot nodes: %s", path, b.Dx(), b.Dy(), strings.ReplaceAll(firstLines(hotT, 3), "\n", " | "))
}

func countColour(img image.Image, want [3]uint8) int {
	n := 0
	b := img.Bounds()
	near := func(a uint32, w uint8) bool { d := int(a>>8) - int(w); return d > -12 && d < 12 }
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if near(r, want[0]) && near(g, want[1]) && near(bl, want[2]) {
				n++
			}
		}
	}
	return n
}

func firstLines(s string, n int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[:min(n, len(l))], "\n")
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(get(t, url)), v); err != nil {
		t.Fatal(err)
	}
}
