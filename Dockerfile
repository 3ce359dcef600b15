# The nexus image: a static binary on a distroless base, running as a non-root user.

FROM golang:1.26-bookworm AS build
WORKDIR /src
# The state directory, made here because the final image has no shell; it is copied
# in owned by nonroot, so a fresh volume mounted there is writable by the server.
RUN mkdir -p -m 0700 /out/state
# Download modules in their own layer, so a code change does not fetch them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# integration/dockerfile_test.go runs this exact command and checks the binary is static.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/nexus ./cmd/nexus

# static-debian12: no libc, no shell; nonroot is uid and gid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/nexus /usr/local/bin/nexus
COPY --from=build --chown=65532:65532 /out/state /var/lib/nexus
# The state directory: registry.db, queues/ and the host's clone of the config repo.
VOLUME /var/lib/nexus
ENV NEXUS_DB=/var/lib/nexus/registry.db
EXPOSE 9090
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/nexus"]
CMD ["serve"]
