package searchwire.harness;

import java.util.Collection;
import java.util.List;

import org.opensearch.analysis.common.CommonAnalysisPlugin;
import org.opensearch.env.Environment;
import org.opensearch.node.Node;
import org.opensearch.plugins.Plugin;
import org.opensearch.transport.Netty4Plugin;

/**
 * The OpenSearch 2.x part of the launcher: the plugin classes (Netty4 for HTTP and transport,
 * analysis-common) and the node built with them. 2.x's protected constructor takes the
 * plugin classes themselves, as the test framework's {@code MockNode} passes them.
 */
final class Plugins {

    private Plugins() {}

    /** Node subclass to reach the protected constructor that accepts classpath plugins. */
    static final class HarnessNode extends Node {
        HarnessNode(Environment env, Collection<Class<? extends Plugin>> plugins) {
            super(env, plugins, true);
        }
    }

    static Node node(Environment env) {
        return new HarnessNode(env, List.of(Netty4Plugin.class, CommonAnalysisPlugin.class));
    }
}
