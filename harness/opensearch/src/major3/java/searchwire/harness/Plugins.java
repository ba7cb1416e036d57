package searchwire.harness;

import java.util.List;

import org.opensearch.Version;
import org.opensearch.analysis.common.CommonAnalysisModulePlugin;
import org.opensearch.env.Environment;
import org.opensearch.node.Node;
import org.opensearch.plugins.Plugin;
import org.opensearch.plugins.PluginInfo;
import org.opensearch.transport.Netty4ModulePlugin;

/**
 * The OpenSearch 3.x part of the launcher. 3.x renamed the module plugin classes
 * ({@code Netty4ModulePlugin}, {@code CommonAnalysisModulePlugin}), and its protected node
 * constructor takes a {@link PluginInfo} per classpath plugin (the plugins service loads
 * each by its class name) instead of the classes; the descriptor says what the test
 * framework's {@code MockNode} says.
 */
final class Plugins {

    private Plugins() {}

    /** Node subclass to reach the protected constructor that accepts classpath plugins. */
    static final class HarnessNode extends Node {
        HarnessNode(Environment env, List<Class<? extends Plugin>> plugins) {
            super(env, plugins.stream().map(Plugins::info).toList(), true);
        }
    }

    private static PluginInfo info(Class<? extends Plugin> c) {
        return new PluginInfo(
            c.getName(), "classpath plugin (searchwire harness)", "NA", Version.CURRENT,
            Integer.toString(Runtime.version().feature()), c.getName(), null, List.of(), false);
    }

    static Node node(Environment env) {
        return new HarnessNode(env, List.of(Netty4ModulePlugin.class, CommonAnalysisModulePlugin.class));
    }
}
