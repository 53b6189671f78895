module github.com/docker/awesome-compose/nginx-golang/backend

go 1.18

require github.com/go-chi/chi/v5 v5.0.7
