# rationd and rationctl, static, on an empty image. Nothing is pulled: the
# binaries are built first (CGO_ENABLED=0) and copied in, so build with the
# context make prepares:
#
#   make image            # builds build/docker/ and tags ration:dev
#
# build/docker holds rationd, rationctl, this file and an empty data/ (the
# /data volume, owned by the non-root user).
FROM scratch
# make image passes the version the binaries are stamped with.
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="ration" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY rationd rationctl /
COPY --chown=65532:65532 data /data
# Non-root (no /etc/passwd in scratch: a numeric user).
USER 65532:65532
VOLUME /data
# gRPC (lease and admin API), Raft, gossip (TCP and UDP), HTTP (/metrics, /readyz).
EXPOSE 7400 7410 7420 7420/udp 7430
ENTRYPOINT ["/rationd"]
CMD ["--help"]
