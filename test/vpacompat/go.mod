module github.com/cgpilot/cgpilot/test/vpacompat

go 1.26.0

require github.com/cgpilot/cgpilot v0.0.0

replace github.com/cgpilot/cgpilot => ../..
