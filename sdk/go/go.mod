module orbit

go 1.19
