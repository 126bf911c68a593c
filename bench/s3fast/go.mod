module kafscale.local/bench/s3fast

go 1.26

require github.com/johannesboyne/gofakes3 v1.2.0

require (
	github.com/ryszard/goskiplist v0.0.0-20150312221310-2dfbae5fcf46 // indirect
	go.shabbyrobe.org/gocovmerge v0.0.0-20230507111327-fa4f82cfbf4d // indirect
	golang.org/x/tools v0.8.0 // indirect
)
