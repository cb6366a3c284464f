module github.com/gpucache/gpucache/api

go 1.26.8
