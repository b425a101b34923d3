# syntax=docker/dockerfile:1
# webhookd: one static binary on a distroless base (CA certificates included).
#   docker build -t webhookd .
#   docker run webhookd migrate | all | serve | worker

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /webhookd ./cmd/webhookd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /webhookd /webhookd
USER nonroot:nonroot
EXPOSE 8080 8081
ENTRYPOINT ["/webhookd"]
CMD ["all"]
