# stampede in a container: a static binary on an empty base image, run as an
# unprivileged user (65532), its state and caches under /var/lib/stampede.
#
#   docker build -t stampede --build-arg VERSION=$(git describe --always) .
#   # an origin for ./public on port 8080 (its tracker inside):
#   docker run -p 8080:8080 -v "$PWD/public:/srv:ro" stampede serve /srv --listen :8080
#   # the daemon, with its state in a volume:
#   docker run -p 7881:7881 -v stampede:/var/lib/stampede stampede daemon --api 127.0.0.1:7880
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# CGO off: a static binary that needs no libc in the final image.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
        -o /out/stampede ./cmd/stampede \
    && mkdir -p /out/state

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/
COPY --from=build /out/stampede /stampede
COPY --from=build --chown=65532:65532 /out/state /var/lib/stampede
USER 65532:65532
# The defaults that read these (serve's manifest cache, the daemon's state
# directory) land in the one writable place.
ENV HOME=/var/lib/stampede \
    XDG_CACHE_HOME=/var/lib/stampede/cache \
    XDG_STATE_HOME=/var/lib/stampede/state
WORKDIR /var/lib/stampede
VOLUME /var/lib/stampede
# serve's usual port, and the daemon's peer port.
EXPOSE 8080 7881
ENTRYPOINT ["/stampede"]
CMD ["help"]
