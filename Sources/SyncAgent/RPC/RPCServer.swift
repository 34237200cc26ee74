import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import SyncAgentCore

/// aria2's JSON-RPC over HTTP (`POST /jsonrpc`) and WebSocket (`/jsonrpc`),
/// on one thread of NIO's own, beside the agent's loop and never in it:
/// requests that read or change what the agent holds are handed to the
/// loop through `RPCGate.mailbox`, and the loop answers them when the
/// events they made are committed. NIO reads and writes the sockets; what
/// is allowed and what the calls mean is decided in `SyncAgentCore`.
final class RPCServer: Sendable {
    let gate: RPCGate
    private let group: MultiThreadedEventLoopGroup
    private let channel: Channel
    private let clients: NIOLoopBoundBox<WebSocketClients>
    private let connections: NIOLoopBoundBox<RPCConnections>
    let address: String

    /// Listens on `listen`; throws (naming the address) when it cannot.
    init(listen: RPCListen, gate: RPCGate) throws {
        self.gate = gate
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let clients = NIOLoopBoundBox.makeBoxSendingValue(WebSocketClients(), eventLoop: loop)
        let connections = NIOLoopBoundBox.makeBoxSendingValue(RPCConnections(), eventLoop: loop)
        let upgrader = NIOWebSocketServerUpgrader(
            maxFrameSize: RPCHTTPPolicy.maximumBodyBytes,
            shouldUpgrade: { channel, head in
                let allowed = head.uri.split(separator: "?").first == "/jsonrpc" && RPCHTTPPolicy.allowsHost(head.headers.first(name: "Host"))
                return channel.eventLoop.makeSucceededFuture(allowed ? HTTPHeaders() : nil)
            },
            upgradePipelineHandler: { channel, _ in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    // The HTTP side was time-limited; a WebSocket may wait for notifications as long as it likes.
                    if let idle = try? sync.handler(type: IdleStateHandler.self) { sync.removeHandler(idle, promise: nil) }
                    if let deadline = try? sync.handler(type: RequestDeadline.self) { sync.removeHandler(deadline, promise: nil) }
                    try sync.addHandler(WebSocketFrameRules())
                    try sync.addHandler(NIOWebSocketFrameAggregator(minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: 256,
                                                                    maxAccumulatedFrameSize: RPCHTTPPolicy.maximumBodyBytes))
                    try sync.addHandler(RPCWebSocketHandler(gate: gate, clients: clients, connections: connections))
                }
            })
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                guard connections.value.admit(channel) else { return channel.close() }
                channel.closeFuture.whenComplete { _ in connections.value.remove(channel) }
                return channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    // A client that does not read what it is sent (pongs to a ping flood, answers) is read
                    // no further until it does: its answers are not buffered for without end.
                    try sync.addHandler(BackPressureHandler())
                    try sync.addHandler(IdleStateHandler(readTimeout: .seconds(RPCHTTPPolicy.idleSeconds)))
                    try sync.addHandler(RequestDeadline())
                    try sync.configureHTTPServerPipeline(withServerUpgrade: (upgraders: [upgrader], completionHandler: { context in
                        context.pipeline.removeHandler(name: RPCHTTPHandler.name, promise: nil)
                    }))
                    try sync.addHandler(RPCHTTPHandler(gate: gate, connections: connections), name: RPCHTTPHandler.name)
                }
            }
        do {
            channel = try bootstrap.bind(host: listen.host, port: listen.port).wait()
        } catch {
            try? group.syncShutdownGracefully()
            throw SystemError(operation: "listen for RPC on \(listen) (rpc_listen)", errno: (error as? IOError)?.errnoCode ?? EADDRINUSE)
        }
        self.group = group
        self.clients = clients
        self.connections = connections
        address = listen.description
    }

    /// Pushes notifications to every WebSocket client (from the loop: NIO's thread writes them).
    func broadcast(_ notifications: [RPCNotification]) {
        guard !notifications.isEmpty else { return }
        let texts = notifications.map { $0.json.serialized }
        let clients = self.clients
        channel.eventLoop.execute {
            for client in clients.value.channels.values {
                // A client that does not read its notifications is let go, not buffered for without end.
                guard client.isWritable else {
                    client.close(promise: nil)
                    continue
                }
                for text in texts {
                    client.write(WebSocketFrame(fin: true, opcode: .text, data: client.allocator.buffer(bytes: text)), promise: nil)
                }
                client.flush()
            }
        }
    }

    /// Stops listening and closes every connection (requests not yet answered are dropped).
    func stop() {
        try? channel.close().wait()
        try? group.syncShutdownGracefully()
    }
}

/// `POST /jsonrpc` (and CORS preflights): a request body, bounded, handed to the gate.
private final class RPCHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    static let name = "rpc-http"

    private let gate: RPCGate
    private let connections: NIOLoopBoundBox<RPCConnections>
    private var head: HTTPRequestHead?
    private var body: ByteBuffer?
    /// The request was answered already (refused); what is left of it is read and dropped.
    private var answered = false
    /// A request was read whole and its answer is not yet written: the connection is not idle.
    private var inFlight = false

    init(gate: RPCGate, connections: NIOLoopBoundBox<RPCConnections>) {
        self.gate = gate
        self.connections = connections
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let request):
            head = request
            body = nil
            answered = false
            if let refusal = refusal(of: request) {
                answered = true
                respond(context, status: refusal.status, body: Array(refusal.text.utf8), contentType: "text/plain", close: true)
            } else if request.method == .OPTIONS {
                answered = true
                respond(context, status: .ok, body: [], contentType: nil, close: !request.isKeepAlive)
            }
        case .body(var chunk):
            guard !answered else { return }
            if body == nil { body = context.channel.allocator.buffer(capacity: chunk.readableBytes) }
            guard (body?.readableBytes ?? 0) + chunk.readableBytes <= RPCHTTPPolicy.maximumBodyBytes else {
                answered = true
                body = nil
                respond(context, status: .payloadTooLarge, body: Array("The request is over 2 MiB.\n".utf8), contentType: "text/plain", close: true)
                return
            }
            body?.writeBuffer(&chunk)
        case .end:
            (try? context.pipeline.syncOperations.handler(type: RequestDeadline.self))?.requestRead()
            guard let request = head, !answered else { return }
            let bytes = body.map { Array($0.readableBytesView) } ?? []
            body = nil
            let loop = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            let channel = context.channel
            inFlight = true
            let admission = gate.handle(bytes, peer: context.remoteAddress?.description ?? "?", later: { ms, work in
                channel.answer(after: ms, work)
            }) { responses, isBatch in
                loop.eventLoop.execute {
                    // Written out here, on NIO's thread: a long answer costs the agent's loop nothing.
                    let (status, answer) = RPCResponse.body(responses, batch: isBatch)
                    let (handler, context) = loop.value
                    handler.inFlight = false
                    handler.respond(context, status: HTTPResponseStatus(statusCode: status), body: answer,
                                    contentType: "application/json-rpc", close: !request.isKeepAlive)
                }
            }
            if admission.trusted > 0 { connections.value.trust(channel) }
        }
    }

    /// What is refused before any body is read: another path or method, a
    /// rebinding `Host`, a body declared over the limit.
    private func refusal(of request: HTTPRequestHead) -> (status: HTTPResponseStatus, text: String)? {
        guard RPCHTTPPolicy.allowsHost(request.headers.first(name: "Host")) else {
            return (.forbidden, "Host \(request.headers.first(name: "Host") ?? "") is not allowed: call by IP address or localhost.\n")
        }
        guard request.uri.split(separator: "?").first == "/jsonrpc" else { return (.notFound, "Not found: the RPC is at /jsonrpc.\n") }
        guard request.method == .POST || request.method == .OPTIONS else {
            return (.methodNotAllowed, "Use POST (or a WebSocket) for /jsonrpc.\n")
        }
        if let length = request.headers.first(name: "Content-Length").flatMap(Int.init), length > RPCHTTPPolicy.maximumBodyBytes {
            return (.payloadTooLarge, "The request is over 2 MiB.\n")
        }
        return nil
    }

    private func respond(_ context: ChannelHandlerContext, status: HTTPResponseStatus, body: [UInt8], contentType: String?, close: Bool) {
        guard context.channel.isActive else { return }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Length", value: String(body.count))
        headers.add(name: "Cache-Control", value: "no-cache")
        if let contentType { headers.add(name: "Content-Type", value: contentType) }
        for (name, value) in RPCHTTPPolicy.corsHeaders(origin: head?.headers.first(name: "Origin"),
                                                       preflightHeaders: head?.method == .OPTIONS
                                                           ? head?.headers.first(name: "Access-Control-Request-Headers") ?? "" : nil) {
            headers.add(name: name, value: value)
        }
        if close { headers.add(name: "Connection", value: "close") }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        if !body.isEmpty { context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil) }
        let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if close {
            let channel = context.channel
            done.whenComplete { _ in channel.close(promise: nil) }
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // A request begun and never finished (slowloris) does not hold a connection for ever; one
        // whose answer waits its turn is not idle, and is closed only when that answer is written.
        guard event is IdleStateHandler.IdleStateEvent else { return context.fireUserInboundEventTriggered(event) }
        if !inFlight { context.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // An upgrade refused (another path, a rebinding Host) comes on as a plain request, answered above.
        guard !(error is NIOWebSocketUpgradeError) else { return }
        context.close(promise: nil)
    }
}

extension Channel {
    /// Runs `work` (an answer that waits its turn) `ms` from now, unless the
    /// connection closes first: a client that hangs up and calls again
    /// leaves nothing behind.
    func answer(after ms: Int64, _ work: @escaping @Sendable () -> Void) {
        let task = eventLoop.scheduleTask(in: .milliseconds(ms)) { work() }
        closeFuture.whenComplete { _ in task.cancel() }
    }
}

/// Answers `408 Request Timeout` and closes a connection whose request
/// has not come whole within `RPCHTTPPolicy.requestSeconds` of its first
/// byte. It sees the bytes before the HTTP decoder does (and writes its
/// answer beneath the HTTP encoder, as bytes); the HTTP handler says when
/// a request was read whole, and the next byte starts the next request's clock.
private final class RequestDeadline: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private var deadline: Scheduled<Void>?
    private static let answer: String = {
        let text = "The request did not come whole within \(RPCHTTPPolicy.requestSeconds) s of its start.\n"
        return "HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain\r\nContent-Length: \(text.utf8.count)\r\n"
            + "Connection: close\r\n\r\n" + text
    }()

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if deadline == nil {
            let loop = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            deadline = context.eventLoop.scheduleTask(in: .seconds(RPCHTTPPolicy.requestSeconds)) {
                let (handler, context) = loop.value
                handler.timedOut(context)
            }
        }
        context.fireChannelRead(data)
    }

    private func timedOut(_ context: ChannelHandlerContext) {
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(channel.allocator.buffer(string: Self.answer)))
            .whenComplete { _ in channel.close(promise: nil) }
    }

    /// The request in progress was read whole.
    func requestRead() {
        deadline?.cancel()
        deadline = nil
    }

    func handlerRemoved(context: ChannelHandlerContext) { requestRead() }

    func channelInactive(context: ChannelHandlerContext) {
        requestRead()
        context.fireChannelInactive()
    }
}

/// What RFC 6455 asks of every frame a client sends, checked on each
/// frame before fragments are joined into a message (the joined message
/// no longer carries a mask): it is masked (§5.1: no browser's frame, nor
/// any library's, is not), and sets no reserved bit, since no extension
/// was agreed (§5.2). A frame that breaks either closes its connection (1002).
private final class WebSocketFrameRules: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private var closing = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        let frame = unwrapInboundIn(data)
        guard frame.maskKey == nil || frame.rsv1 || frame.rsv2 || frame.rsv3 else { return context.fireChannelRead(data) }
        closing = true
        var code = context.channel.allocator.buffer(capacity: 2)
        code.write(webSocketErrorCode: .protocolError)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: code)))
            .whenComplete { _ in channel.close(promise: nil) }
    }
}

/// Every connection, on NIO's thread. A page in the user's browser can
/// open many (six a host name, and `a.localhost`, `b.localhost` … are as
/// many names) and hold each with a guess that waits its turn; the
/// secret's holder must still get in. So at `maximumConnections` a new
/// connection closes the oldest one that has made no call with the
/// secret (its waiting answer is dropped with it); only when every one
/// has made such a call is the new one refused.
final class RPCConnections {
    private var open: [ObjectIdentifier: Channel] = [:]
    /// Connections that have made no call with the secret, oldest first.
    private var untrusted: [ObjectIdentifier] = []

    /// Whether `channel` may stay (room made for it if need be).
    func admit(_ channel: Channel) -> Bool {
        if open.count >= RPCHTTPPolicy.maximumConnections {
            guard !untrusted.isEmpty else { return false }
            open.removeValue(forKey: untrusted.removeFirst())?.close(promise: nil)
        }
        let id = ObjectIdentifier(channel)
        open[id] = channel
        untrusted.append(id)
        return true
    }

    /// The connection made a call with the secret.
    func trust(_ channel: Channel) {
        let id = ObjectIdentifier(channel)
        untrusted.removeAll { $0 == id }
    }

    func remove(_ channel: Channel) {
        let id = ObjectIdentifier(channel)
        open[id] = nil
        untrusted.removeAll { $0 == id }
    }
}

/// The WebSocket clients, on NIO's thread: every one hears the
/// notifications. A web page can open sockets without the secret, and a
/// listener (aria2p's) never needs it, so clients that have made no call
/// with the secret are at most `maximumUntrustedWebSockets`: when another
/// comes, the oldest of them goes. Sockets no one authenticated never
/// fill the connections, and a client that calls with the secret stays.
final class WebSocketClients {
    private(set) var channels: [ObjectIdentifier: Channel] = [:]
    /// Clients that have made no call with the secret, oldest first.
    private var untrusted: [ObjectIdentifier] = []

    func add(_ channel: Channel) {
        let id = ObjectIdentifier(channel)
        channels[id] = channel
        untrusted.append(id)
        if untrusted.count > RPCHTTPPolicy.maximumUntrustedWebSockets {
            channels[untrusted.removeFirst()]?.close(promise: nil)
        }
    }

    /// The client made a call with the secret.
    func trust(_ channel: Channel) {
        untrusted.removeAll { $0 == ObjectIdentifier(channel) }
    }

    func remove(_ channel: Channel) {
        let id = ObjectIdentifier(channel)
        channels[id] = nil
        untrusted.removeAll { $0 == id }
    }
}

/// One WebSocket client: each text message is a request, answered in a
/// text message; notifications are pushed to it as events commit. Its
/// messages are taken one at a time, each once the one before is
/// answered (the socket is read no further meanwhile): a client's calls
/// waiting for the agent are one, and a guess at the secret that waits
/// its turn holds up the calls sent after it.
private final class RPCWebSocketHandler: ChannelDuplexHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private let gate: RPCGate
    private let clients: NIOLoopBoundBox<WebSocketClients>
    private let connections: NIOLoopBoundBox<RPCConnections>
    /// Messages read, not yet handed to the gate.
    private var queued: [ByteBuffer] = []
    private var answering = false
    private var readWanted = false
    private var removed = false

    init(gate: RPCGate, clients: NIOLoopBoundBox<WebSocketClients>, connections: NIOLoopBoundBox<RPCConnections>) {
        self.gate = gate
        self.clients = clients
        self.connections = connections
    }

    func handlerAdded(context: ChannelHandlerContext) {
        clients.value.add(context.channel)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        removed = true
        clients.value.remove(context.channel)
    }

    func channelInactive(context: ChannelHandlerContext) {
        clients.value.remove(context.channel)
        context.fireChannelInactive()
    }

    func read(context: ChannelHandlerContext) {
        if answering { readWanted = true } else { context.read() }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text:
            queued.append(frame.unmaskedData)
            takeNext(context)
        case .ping:
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)), promise: nil)
        case .connectionClose:
            var data = frame.unmaskedData
            let code = data.readSlice(length: 2) ?? context.channel.allocator.buffer(capacity: 0)
            sendCloseFrame(context, code)
        case .binary:
            // aria2's requests are JSON text: anything else ends the conversation (RFC 6455 §7.4.1, 1003).
            sendCloseFrame(context, .unacceptableData)
        case .pong:
            break
        default:
            // A reserved opcode.
            sendCloseFrame(context, .protocolError)
        }
    }

    /// Hands the next message to the gate, unless one is being answered.
    private func takeNext(_ context: ChannelHandlerContext) {
        guard !answering, !removed, !queued.isEmpty else { return }
        let message = queued.removeFirst()
        answering = true
        let channel = context.channel
        let loop = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let admission = gate.handle(message.readableBytesView, peer: channel.remoteAddress?.description ?? "?", later: { ms, work in
            channel.answer(after: ms, work)
        }) { responses, isBatch in
            channel.eventLoop.execute {
                let (_, answer) = RPCResponse.body(responses, batch: isBatch)
                channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .text, data: channel.allocator.buffer(bytes: answer)), promise: nil)
                let (handler, context) = loop.value
                handler.answered(context)
            }
        }
        if admission.trusted > 0 {
            clients.value.trust(channel)
            connections.value.trust(channel)
        }
    }

    private func answered(_ context: ChannelHandlerContext) {
        answering = false
        guard !removed else { return }
        takeNext(context)
        if !answering, readWanted {
            readWanted = false
            context.read()
        }
    }

    private func sendCloseFrame(_ context: ChannelHandlerContext, _ reason: WebSocketErrorCode) {
        var code = context.channel.allocator.buffer(capacity: 2)
        code.write(webSocketErrorCode: reason)
        sendCloseFrame(context, code)
    }

    private func sendCloseFrame(_ context: ChannelHandlerContext, _ code: ByteBuffer) {
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: code)))
            .whenComplete { _ in channel.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }
}
