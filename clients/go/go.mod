module github.com/tern-db/tern/clients/go

go 1.19
