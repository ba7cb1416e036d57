package org.elasticsearch.node;

import java.util.Collection;
import java.util.List;

import org.elasticsearch.env.Environment;
import org.elasticsearch.plugins.HarnessPluginsService;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.plugins.PluginsLoader;
import org.elasticsearch.plugins.PluginsService;

/**
 * An Elasticsearch node whose plugins are classes on the classpath. In 8.x the only public
 * node constructor loads plugins from directories; the one taking a {@code NodeConstruction}
 * and the {@code NodeServiceProvider} that makes the plugins service are package-private, so
 * this class sits in Elasticsearch's own package (the server jar is not sealed), as the test
 * framework's mock node does.
 */
public final class HarnessNode extends Node {

    public HarnessNode(Environment env, Collection<Class<? extends Plugin>> plugins) {
        super(NodeConstruction.prepareConstruction(
            env,
            HarnessPluginsService.emptyLoader(),
            new ClasspathPlugins(List.copyOf(plugins)),
            true));
    }

    /** Replaces only the plugins service; every other service is the stock one. */
    private static final class ClasspathPlugins extends NodeServiceProvider {
        private final List<Class<? extends Plugin>> plugins;

        ClasspathPlugins(List<Class<? extends Plugin>> plugins) {
            this.plugins = plugins;
        }

        @Override
        PluginsService newPluginService(Environment env, PluginsLoader ignored) {
            return new HarnessPluginsService(env.settings(), env.configDir(), plugins);
        }
    }
}
