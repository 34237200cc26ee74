/// One request of a resumable upload's protocol, sent in place of the
/// task's own request: its URL, method and headers, and the slice of
/// `body_file` it carries (none for OPTIONS, creation, HEAD, DELETE).
public struct ProtocolRequest: Equatable, Sendable {
    public var url: String
    public var method: String
    public var headers: [Header]
    public var body: ByteSpan?

    public init(url: String, method: String, headers: [Header], body: ByteSpan?) {
        self.url = url; self.method = method; self.headers = headers; self.body = body
    }
}

/// The validators a file on disk was published with: asked about with
/// `If-None-Match` / `If-Modified-Since` (`overwrite = "update"`).
public struct PublishedValidators: Equatable, Sendable {
    public var etag: String?
    public var lastModified: String?
    public init(etag: String?, lastModified: String?) { self.etag = etag; self.lastModified = lastModified }
}

/// Everything one request sends and what its answer is judged against,
/// decided from the task before anything reaches curl: a pure function of
/// the job, the config's headers and where the task stands.
public struct RequestPlan: Equatable, Sendable {
    public enum Body: Equatable, Sendable {
        case none
        /// No body, said so (`Content-Length: 0`): a protocol's POST or PATCH.
        case empty
        /// A file, or a slice of it, as the whole body. `rewindable`: curl may
        /// send it again by itself (on a reused connection that died).
        case file(path: String, slice: ByteSpan?, rewindable: Bool)
        /// A file as the last part of a multipart form, after the form's fields.
        case form(path: String, field: String, fields: [FormField])
    }

    public enum Redirects: Equatable, Sendable {
        /// curl follows them (it drops Authorization and Cookie on a change of host).
        case byCurl
        /// The agent takes each hop (`ask.hopStatuses`), sending credentials to the job's host only.
        case byAgent
        /// A protocol request: a 3xx is an answer, never followed.
        case never
    }

    public var url: String
    public var method: String
    public var headers: [Header]
    /// `Range` as curl takes it: "FIRST-LAST" or "FIRST-".
    public var range: String?
    public var body: Body
    public var redirects: Redirects
    /// What the answer is judged against (see `ResponseRules`).
    public var ask: ExchangeAsk
    /// The validators asked "only if changed" with: a 304 must confirm them.
    public var ifChanged: PublishedValidators?
    /// Progress counts the bytes sent (an upload), not those received.
    public var countsSent: Bool
    /// The final answer's headers are kept (`finished` records them, a protocol reads them).
    public var keepsResponseHeaders: Bool
    /// One step of a resumable upload's protocol: its answer is short, its
    /// informational answers bounded, and its body checked by the protocol.
    public var isProtocolStep: Bool

    /// Why a request cannot be made.
    public struct Refusal: Error, Equatable, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// The request of `task` (or of one step of its protocol).
    /// - Parameters:
    ///   - sharedHeaders: the config's `headers`; the job's replace those of the same name.
    ///   - origin: the URL whose host may receive the job's credentials (a child's parent's); default the job's own.
    ///   - offset: the bytes already held (the body continues from there).
    ///   - rangeEnd: one connection of a segmented download asks for `offset ..< rangeEnd` only.
    ///   - ifRange: the validator guarding a resume (or a range).
    ///   - ifChanged: `overwrite = "update"`: the validators the file on disk was published with.
    public static func of(_ task: TaskState, sharedHeaders: [Header], origin: String? = nil, offset: Int64 = 0,
                          rangeEnd: Int64? = nil, ifRange: String? = nil, ifChanged: PublishedValidators? = nil,
                          protocolRequest: ProtocolRequest? = nil) throws -> RequestPlan {
        let spec = task.spec
        let behaviour = protocolRequest == nil ? spec.behaviour : .protocolRequest
        let url = protocolRequest?.url ?? task.currentURL
        let origin = origin ?? spec.url
        // Only a request for the whole file may be answered "not modified".
        let ifChanged = offset == 0 ? ifChanged : nil

        // curl drops Authorization and Cookie when a redirect changes host, but not the other
        // credential headers (X-Api-Key, Private-Token …): a transfer that sends one takes each
        // hop through the agent, which sends them only to the job's own host. A request with a
        // body is followed only where the hop keeps its method and body (307, 308).
        let sendsCredentials = (sharedHeaders + spec.headers).contains { $0.isSecret }
        let agentFollows = sendsCredentials && (behaviour.canFollowRedirectsItself || protocolRequest == nil)
        let hopStatuses: Set<Int> = behaviour.canFollowRedirectsItself || spec.effectiveMethod == "GET"
            ? [301, 302, 303, 307, 308] : [307, 308]
        // tus and the IETF draft never redirect an upload: a 3xx to a protocol request is refused, not followed.
        let redirects: Redirects = agentFollows ? .byAgent : protocolRequest == nil ? .byCurl : .never

        var headers = sharedHeaders
        for header in spec.headers + (protocolRequest?.headers ?? []) {
            headers.removeAll { $0.name.lowercased() == header.name.lowercased() }
            headers.append(header)
        }
        // Credentials go to the job's own host only, never to where a redirect led.
        if url != origin, URLRules.hostKey(url) != URLRules.hostKey(origin) { headers.removeAll(where: \.isSecret) }

        var range: String?
        var sentIfRange: String?
        if let slice = spec.byteRange, let start = slice.offset {
            // Only this slice of the resource, from where the partial file ends.
            range = "\(start + offset)-\(start + slice.length - 1)"
            if offset > 0 { sentIfRange = ifRange }
        } else if let rangeEnd {
            range = "\(offset)-\(rangeEnd - 1)"
            sentIfRange = ifRange
        } else if offset > 0 {
            range = "\(offset)-"
            sentIfRange = ifRange
        }
        if let sentIfRange { headers.append(Header(name: "If-Range", value: sentIfRange)) }
        if let ifChanged {
            if let etag = ifChanged.etag { headers.append(Header(name: "If-None-Match", value: etag)) }
            if let lastModified = ifChanged.lastModified { headers.append(Header(name: "If-Modified-Since", value: lastModified)) }
        }

        let method = protocolRequest?.method ?? spec.effectiveMethod
        var body = Body.none
        if let bodyFile = spec.bodyFile {
            if let protocolRequest {
                if let slice = protocolRequest.body { body = .file(path: bodyFile, slice: slice, rewindable: false) }
            } else if let field = spec.formField {
                body = .form(path: bodyFile, field: field, fields: spec.form)
            } else {
                body = .file(path: bodyFile, slice: nil, rewindable: true)
                // curl would call a POST body a urlencoded form; a file is bytes.
                if method != "PUT", !headers.contains(where: { $0.name.lowercased() == "content-type" }) {
                    headers.append(Header(name: "Content-Type", value: "application/octet-stream"))
                }
            }
        }
        if body == .none, protocolRequest != nil, method == "POST" || method == "PATCH" { body = .empty }

        for header in headers {
            // Checked at parse time; checked again here, where it reaches the wire.
            guard !header.value.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) else {
                throw Refusal(description: "header \(header.name) has a line break in its value")
            }
        }

        let ask = ExchangeAsk(
            offset: offset, rangeEnd: rangeEnd, slice: spec.byteRange, ifRange: sentIfRange, conditional: ifChanged != nil,
            accepts: behaviour.accepts, resumes: behaviour.resumes, hopStatuses: redirects == .byAgent ? hopStatuses : [],
            knownTotal: protocolRequest != nil ? nil : spec.byteRange?.length ?? (spec.isResumable ? task.total : nil),
            // A range of a segmented download is guarded by its download's validator, which the log may not hold yet.
            heldETag: rangeEnd != nil ? ifRange.flatMap { ETags.isStrong($0) ? $0 : nil } : task.etag,
            heldLastModified: rangeEnd != nil ? ifRange.flatMap { ETags.isStrong($0) ? nil : $0 } : task.lastModified,
            // (A slice's size is the slice's: its file's is not known to compare.)
            retargetHeld: task.awaitsRetargetCheck && protocolRequest == nil && spec.byteRange == nil && (offset > 0 || rangeEnd != nil)
                ? RetargetRules.HeldFile(etag: task.etag, lastModified: task.lastModified, size: task.total) : nil)
        return RequestPlan(url: url, method: method, headers: headers, range: range, body: body, redirects: redirects, ask: ask,
                           ifChanged: ifChanged, countsSent: behaviour.countsSent, keepsResponseHeaders: behaviour.recordsResponse,
                           isProtocolStep: protocolRequest != nil)
    }
}
